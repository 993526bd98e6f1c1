//! Which coordinator to dial next. `--coordinator` is a comma-separated
//! bootstrap list; any coordinator on it answers a standby's refusal with
//! the leader's URL (NOT_LEADER), which is dialled next even when it is not
//! on the list, so a coordinator started later is found through the others.
//! The agent remembers the highest leader epoch it has registered under and
//! refuses a session of a lower one: a deposed leader's commands never
//! reach it after a newer leader's.
//!
//! Coordinators also publish their member set (every live coordinator's
//! URL) with Registered and at each change: the agent dials those after its
//! bootstrap list, and keeps them in `<work-dir>/coordinators` so that a
//! restarted agent finds a coordinator started after it was configured.

/// The file in the work dir that keeps the learned member set.
pub const MEMBERS_FILE: &str = "coordinators";

/// The most learned coordinators kept (a member set is a handful).
const MAX_LEARNED: usize = 32;
/// The longest URL taken from a member set.
const MAX_URL: usize = 512;

/// The bootstrap list, the learned member set, the leader hint and the
/// highest epoch seen.
#[derive(Debug, Clone)]
pub struct Targets {
    /// The bootstrap list, then the learned members not on it.
    list: Vec<String>,
    /// How many entries of `list` are the bootstrap list.
    bootstrap: usize,
    next: usize,
    hint: Option<String>,
    /// Dials since the last registered session (what paces the backoff).
    misses: usize,
    highest_epoch: u64,
    /// The last address that could not be reached or did not answer, and
    /// when: a standby's hint naming it is not followed for a while (its
    /// lease may still be live though it is gone or frozen).
    last_failed: Option<(String, std::time::Instant)>,
}

/// How long a hint to an address that just failed is ignored.
const HINT_QUARANTINE: std::time::Duration = std::time::Duration::from_secs(3);

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
            bootstrap: list.len(),
            list,
            next: 0,
            hint: None,
            misses: 0,
            highest_epoch: 0,
            last_failed: None,
        }
    }

    /// The URL to dial now: the leader a standby named, else the next on
    /// the list, in turn.
    pub fn pick(&mut self) -> String {
        if let Some(hint) = self.hint.take() {
            return hint;
        }
        let mut url = self.list[self.next % self.list.len()].clone();
        self.next = (self.next + 1) % self.list.len();
        // The address that just failed goes last while others are left.
        if self.list.len() > 1 && self.quarantined(&url) {
            url = self.list[self.next % self.list.len()].clone();
            self.next = (self.next + 1) % self.list.len();
        }
        url
    }

    /// A standby said where the leader is; a hint to the address that
    /// just failed is not followed (the list goes on instead).
    pub fn follow(&mut self, leader: String) {
        if !self.quarantined(&leader) {
            self.hint = Some(leader);
        }
    }

    fn quarantined(&self, url: &str) -> bool {
        self.last_failed
            .as_ref()
            .is_some_and(|(failed, at)| failed == url && at.elapsed() < HINT_QUARANTINE)
    }

    /// `url` could not be reached, or did not answer in time.
    pub fn failed(&mut self, url: &str) {
        self.last_failed = Some((url.to_string(), std::time::Instant::now()));
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

    /// Takes a published member set: its URLs (of the bootstrap list's
    /// scheme, at most [`MAX_LEARNED`]) replace the members learned before.
    /// Returns the learned members when they changed (to keep them).
    /// An empty set says nothing (a coordinator without a URL to give).
    pub fn learn(&mut self, members: &[String]) -> Option<Vec<String>> {
        if members.is_empty() {
            return None;
        }
        let scheme = |u: &str| u.split_once("://").map(|(s, _)| s.to_string());
        let wanted = scheme(&self.list[0]);
        let mut learned: Vec<String> = Vec::new();
        for url in members.iter().map(|u| u.trim()) {
            let fits = !url.is_empty()
                && url.len() <= MAX_URL
                && !url.chars().any(char::is_whitespace)
                && matches!(scheme(url).as_deref(), Some("http" | "https"))
                && scheme(url) == wanted;
            if fits
                && !self.list[..self.bootstrap].iter().any(|b| b == url)
                && !learned.iter().any(|l| l == url)
                && learned.len() < MAX_LEARNED
            {
                learned.push(url.to_string());
            }
        }
        if self.list[self.bootstrap..] == learned[..] {
            return None;
        }
        self.list.truncate(self.bootstrap);
        self.list.extend(learned.iter().cloned());
        self.next %= self.list.len();
        Some(learned)
    }

    /// The members learned so far (not on the bootstrap list).
    pub fn learned(&self) -> &[String] {
        &self.list[self.bootstrap..]
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
    fn a_member_set_is_dialled_after_the_bootstrap_list() {
        let mut t = Targets::new("http://a:1,http://b:2");
        let members = vec![
            "http://b:2".to_string(),
            "http://c:3".to_string(),
            "https://d:4".to_string(),
            "ftp://e:5".to_string(),
            "http://c:3".to_string(),
            "http://has space".to_string(),
        ];
        assert_eq!(t.learn(&members), Some(vec!["http://c:3".to_string()]));
        assert_eq!(t.learn(&members), None, "unchanged");
        assert_eq!(t.describe(), "http://a:1,http://b:2,http://c:3");
        let picks: Vec<String> = (0..3).map(|_| t.pick()).collect();
        assert_eq!(picks, vec!["http://a:1", "http://b:2", "http://c:3"]);
        // A later set replaces what was learned; the bootstrap list stays.
        assert_eq!(
            t.learn(&["http://f:6".to_string()]),
            Some(vec!["http://f:6".to_string()])
        );
        assert_eq!(t.describe(), "http://a:1,http://b:2,http://f:6");
        assert_eq!(t.learn(&[]), None, "an empty set says nothing");
        assert_eq!(t.learn(&["http://a:1".to_string()]), Some(vec![]));
        assert_eq!(t.describe(), "http://a:1,http://b:2");
        let many: Vec<String> = (0..100).map(|i| format!("http://m{i}:1")).collect();
        assert_eq!(t.learn(&many).unwrap().len(), MAX_LEARNED);
    }

    #[test]
    fn a_hint_to_an_address_that_just_failed_is_not_followed() {
        let mut t = Targets::new("http://a:1,http://b:2");
        assert_eq!(t.pick(), "http://a:1");
        t.failed("http://a:1");
        t.follow("http://a:1".into());
        assert_eq!(
            t.pick(),
            "http://b:2",
            "the frozen leader is not dialled again at once"
        );
        assert_eq!(
            t.pick(),
            "http://b:2",
            "nor in its turn, while another is left"
        );
        t.follow("http://a:1".into());
        assert_eq!(
            t.pick(),
            "http://b:2",
            "the frozen leader is not dialled again at once"
        );
        t.follow("http://c:3".into());
        assert_eq!(t.pick(), "http://c:3");
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
