//! Who is calling (the [`Principal`] the auth layer put in the request) and
//! whether it may touch a team's resources.

use super::error::ApiError;
use crate::auth::AuthMode;
use crate::context::Context;
use crate::model::{Principal, Training};
use tonic::{Request, Status};

/// The caller of `request`. Without the auth layer (handlers called
/// directly, in tests) the caller is anonymous only under `--auth none`.
pub fn caller<T>(ctx: &Context, request: &Request<T>) -> Result<Principal, Status> {
    match request.extensions().get::<Principal>() {
        Some(p) => Ok(p.clone()),
        None if ctx.auth.mode == AuthMode::None => Ok(Principal::Anonymous),
        None => Err(ApiError::Internal("the call passed no authentication".into()).into()),
    }
}

/// PERMISSION_DENIED unless `who` may see `team`'s resources (AIP-211: the
/// same answer whether or not what it names exists in another team).
pub fn ensure_team(who: &Principal, team: &str, what: &str) -> Result<(), Status> {
    if who.sees_team(team) {
        return Ok(());
    }
    Err(not_yours(who, what, team))
}

/// The PERMISSION_DENIED of something outside the caller's team (or that
/// does not exist: the same answer). Its audit row names `what` and its
/// `team` (see [`crate::auth::audit_target`]); the caller sees neither.
pub fn not_yours(who: &Principal, what: &str, team: &str) -> Status {
    ApiError::NotYours {
        what: what.to_string(),
        caller_team: who.team().to_string(),
        owner: team.to_string(),
    }
    .into()
}

/// Training `id` (named by request field `field`), if `who` may see it:
/// INVALID_ARGUMENT for an empty id; NOT_FOUND when there is none, except
/// to a caller scoped to a team, to whom (AIP-211) a missing training is
/// PERMISSION_DENIED like another team's, so ids reveal nothing.
pub async fn visible_training(
    ctx: &Context,
    who: &Principal,
    field: &str,
    id: &str,
) -> Result<Training, Status> {
    require_id(field, id)?;
    let found = ctx.db.get_training(id).await.map_err(ApiError::from)?;
    visible(who, id, found)
}

/// INVALID_ARGUMENT naming `field` when a training id is empty.
pub fn require_id(field: &str, id: &str) -> Result<(), Status> {
    if id.is_empty() {
        return Err(ApiError::field(field, "required").into());
    }
    Ok(())
}

/// A training looked up by `id`, as [`visible_training`] answers for it.
pub fn visible(who: &Principal, id: &str, found: Option<Training>) -> Result<Training, Status> {
    match found {
        Some(training) => {
            ensure_training(who, &training)?;
            Ok(training)
        }
        None if !who.is_cluster_admin() => Err(not_yours(who, &format!("training {id}"), "")),
        None => Err(
            ApiError::from(crate::persistence::LogicalError::TrainingNotFound(
                id.to_string(),
            ))
            .into(),
        ),
    }
}

/// [`ensure_team`] for a training.
pub fn ensure_training(who: &Principal, training: &Training) -> Result<(), Status> {
    ensure_team(who, &training.team, &format!("training {}", training.id))
}

/// The team filter of a listing: every team for a cluster-admin, else its own.
pub fn team_filter(who: &Principal) -> Option<String> {
    (!who.is_cluster_admin()).then(|| who.team().to_string())
}

/// Which trainings a caller may see, by id, remembering what the database
/// said. Bounded: forgotten wholesale past [`TeamScope::CAPACITY`] ids.
pub struct TeamScope {
    who: Principal,
    db: crate::persistence::Persistence,
    known: std::collections::HashMap<String, bool>,
}

impl TeamScope {
    const CAPACITY: usize = 4096;

    pub fn new(ctx: &Context, who: &Principal) -> Self {
        Self {
            who: who.clone(),
            db: ctx.db.clone(),
            known: Default::default(),
        }
    }

    /// Whether the caller may see training `id` (one unknown to the
    /// database counts as not visible).
    pub async fn sees(&mut self, id: &str) -> bool {
        if self.who.is_cluster_admin() {
            return true;
        }
        if let Some(seen) = self.known.get(id) {
            return *seen;
        }
        let visible = match self.db.get_training(id).await {
            Ok(Some(t)) => self.who.sees_team(&t.team),
            _ => false,
        };
        if self.known.len() >= Self::CAPACITY {
            self.known.clear();
        }
        self.known.insert(id.to_string(), visible);
        visible
    }

    /// PERMISSION_DENIED when a request filters by a training the caller may
    /// not see (or that does not exist: the same answer).
    pub async fn check_filter(&mut self, training_id: &str) -> Result<(), Status> {
        if training_id.is_empty() || self.sees(training_id).await {
            return Ok(());
        }
        Err(not_yours(&self.who, &format!("training {training_id}"), ""))
    }
}
