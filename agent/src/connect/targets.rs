//! Which coordinator to dial next. `--coordinator` is a comma-separated
//! bootstrap list; any coordinator on it answers a standby's refusal with
//! the leader's URL (NOT_LEADER), which is dialled next even when it is not
//! on the list, so a coordinator started later is found through the others.
//! The agent remembers the highest leader epoch it has registered under and
//! refuses a session of a lower one: a deposed leader's commands never
//! reach it after a newer leader's.

/// The bootstrap list, the leader hint and the highest epoch seen.
#[derive(Debug, Clone)]
pub struct Targets {
    list: Vec<String>,
    next: usize,
    hint: Option<String>,
    /// Dials since the last registered session (what paces the backoff).
    misses: usize,
    highest_epoch: u64,
}

impl Targets {
    /// From `a,b,c` (blanks ignored; the list is never empty).
    pub fn new(list: &str) -> Self {
        let mut list: Vec<String> = list
            .split(',')
            .map(str::trim)
            .filter(|u| !u.is_empty())
            .map(String::from)
            .collect();
        if list.is_empty() {
            list.push(crate::cli::COORDINATOR_DEFAULT.to_string());
        }
        Self {
            list,
            next: 0,
            hint: None,
            misses: 0,
            highest_epoch: 0,
        }
    }

    /// The URL to dial now: the leader a standby named, else the next on
    /// the list, in turn.
    pub fn pick(&mut self) -> String {
        if let Some(hint) = self.hint.take() {
            return hint;
        }
        let url = self.list[self.next % self.list.len()].clone();
        self.next = (self.next + 1) % self.list.len();
        url
    }

    /// A standby said where the leader is.
    pub fn follow(&mut self, leader: String) {
        self.hint = Some(leader);
    }

    /// A dial failed. `true` when every address has been tried since the
    /// last session: time to back off rather than dial at once.
    pub fn missed(&mut self) -> bool {
        self.misses += 1;
        self.misses >= self.list.len() && self.hint.is_none()
    }

    /// A session registered: the next failure starts a fresh round.
    pub fn registered(&mut self) {
        self.misses = 0;
    }

    /// Accepts a session under `epoch` unless a newer leader was seen.
    pub fn accept_epoch(&mut self, epoch: u64) -> Result<(), u64> {
        if epoch < self.highest_epoch {
            return Err(self.highest_epoch);
        }
        self.highest_epoch = epoch;
        Ok(())
    }

    /// The whole list, for logs.
    pub fn describe(&self) -> String {
        self.list.join(",")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_list_is_dialled_in_turn_and_a_hint_first() {
        let mut t = Targets::new("http://a:1, http://b:2,,");
        assert_eq!(t.pick(), "http://a:1");
        assert!(!t.missed(), "b is still untried");
        t.follow("http://c:3".into());
        assert!(!t.missed(), "a hint is dialled at once");
        assert_eq!(t.pick(), "http://c:3");
        assert_eq!(t.pick(), "http://b:2");
        assert!(t.missed(), "every address failed: back off");
        t.registered();
        assert_eq!(t.pick(), "http://a:1");
        assert!(!t.missed());
    }

    #[test]
    fn an_empty_list_means_the_default() {
        let mut t = Targets::new(" , ");
        assert_eq!(t.pick(), crate::cli::COORDINATOR_DEFAULT);
    }

    #[test]
    fn a_lower_epoch_than_seen_is_refused() {
        let mut t = Targets::new("http://a:1");
        assert_eq!(t.accept_epoch(3), Ok(()));
        assert_eq!(t.accept_epoch(3), Ok(()));
        assert_eq!(t.accept_epoch(2), Err(3));
        assert_eq!(t.accept_epoch(4), Ok(()));
        assert_eq!(t.accept_epoch(0), Err(4));
    }
}
