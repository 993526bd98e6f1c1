//! Who is calling, and what is recorded about it: roles, principals, audit
//! entries. The permission each RPC needs is `crate::auth::permissions`'.

use std::fmt;

/// What a user token may do, each role including the ones before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Role {
    /// Reads its team's trainings, checkpoints, reports and alerts; the fleet.
    Viewer,
    /// Also creates and cancels its team's trainings.
    Editor,
    /// Also manages its team's tokens and reads its team's audit log.
    Admin,
    /// Everything, across teams: quotas, every team's tokens and audit log.
    ClusterAdmin,
}

impl Role {
    pub const ALL: [Role; 4] = [Role::Viewer, Role::Editor, Role::Admin, Role::ClusterAdmin];

    pub fn as_str(self) -> &'static str {
        match self {
            Role::Viewer => "viewer",
            Role::Editor => "editor",
            Role::Admin => "admin",
            Role::ClusterAdmin => "cluster-admin",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|r| r.as_str() == s)
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A team name: 1 to 63 of lowercase letters, digits, `-`, `_`, `.`.
pub fn valid_team(team: &str) -> bool {
    (1..=63).contains(&team.len())
        && team
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"-_.".contains(&b))
}

/// The caller of an RPC, as the auth layer established it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Principal {
    /// A user with a bearer token.
    User {
        token_id: String,
        name: String,
        team: String,
        role: Role,
    },
    /// An agent, by the identity of its client certificate.
    Agent { name: String },
    /// Anyone, under `--auth none` (a single trusted user on loopback): may
    /// do everything, team "".
    Anonymous,
}

impl Principal {
    /// The role it acts with (agents have none: they only Connect).
    pub fn role(&self) -> Option<Role> {
        match self {
            Principal::User { role, .. } => Some(*role),
            Principal::Anonymous => Some(Role::ClusterAdmin),
            Principal::Agent { .. } => None,
        }
    }

    /// The team its work belongs to ("" for the anonymous user and agents).
    pub fn team(&self) -> &str {
        match self {
            Principal::User { team, .. } => team,
            _ => "",
        }
    }

    pub fn is_cluster_admin(&self) -> bool {
        self.role() == Some(Role::ClusterAdmin)
    }

    /// Whether it may see and act on `team`'s resources (its own team, or
    /// every team as a cluster-admin).
    pub fn sees_team(&self, team: &str) -> bool {
        self.is_cluster_admin() || (self.role().is_some() && self.team() == team)
    }

    /// How the audit log names it: (kind, name, team).
    pub fn actor(&self) -> (&'static str, String, String) {
        match self {
            Principal::User { name, team, .. } => ("token", name.clone(), team.clone()),
            Principal::Agent { name } => ("agent", name.clone(), String::new()),
            Principal::Anonymous => ("anonymous", "anonymous".into(), String::new()),
        }
    }
}

/// One audit row: who did (or was refused) what, to what, and the outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditEntry {
    pub actor_kind: String,
    pub actor: String,
    pub actor_team: String,
    /// The RPC (`cohort.v1.TrainingService/CreateTraining`) or the offline command.
    pub method: String,
    /// What it was about (a training id, a token name, a team), "" when nothing.
    pub target: String,
    /// The team of the target ("" when none).
    pub target_team: String,
    /// The gRPC code name it ended with (`OK`, `PERMISSION_DENIED`, ...).
    pub code: String,
    pub detail: String,
}

impl AuditEntry {
    /// A successful change by `who`.
    pub fn ok(who: &Principal, method: &str, target: &str, target_team: &str) -> Self {
        let (kind, actor, team) = who.actor();
        Self {
            actor_kind: kind.into(),
            actor,
            actor_team: team,
            method: method.into(),
            target: target.into(),
            target_team: target_team.into(),
            code: "OK".into(),
            detail: String::new(),
        }
    }

    /// The same entry with another outcome (a gRPC code's name).
    pub fn with(mut self, code: &str, detail: impl Into<String>) -> Self {
        self.code = code.into();
        self.detail = detail.into();
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_order_and_round_trip() {
        assert!(Role::Viewer < Role::Editor && Role::Admin < Role::ClusterAdmin);
        for r in Role::ALL {
            assert_eq!(Role::parse(r.as_str()), Some(r));
        }
        assert_eq!(Role::parse("root"), None);
    }

    #[test]
    fn teams_scope_users_but_not_cluster_admins() {
        let user = |team: &str, role| Principal::User {
            token_id: "tok".into(),
            name: "n".into(),
            team: team.into(),
            role,
        };
        assert!(user("a", Role::Viewer).sees_team("a"));
        assert!(!user("a", Role::Admin).sees_team("b"));
        assert!(user("a", Role::ClusterAdmin).sees_team("b"));
        assert!(Principal::Anonymous.sees_team("anything"));
        assert!(!Principal::Agent { name: "h".into() }.sees_team(""));
        assert!(
            valid_team("ml-research.v2")
                && !valid_team("A")
                && !valid_team("a/b")
                && !valid_team("")
        );
    }
}
