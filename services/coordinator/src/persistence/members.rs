//! The coordinators sharing one PostgreSQL database, by `--advertise` URL:
//! each marks itself seen at every lease tick (standbys too), and those
//! seen lately are the member set that agents and CLIs add to their
//! bootstrap lists. Times are the database's (`now()`), as for the lease.
//! Rows unseen for an hour are deleted, so the table stays as small as the
//! set of coordinators that ever ran lately.

use super::lease::pg;
use super::{DatabaseError, Persistence};
use diesel::prelude::*;
use diesel::sql_types::{Double, Text};
use std::time::Duration;

/// How long an unseen member's row is kept.
const FORGET_AFTER: Duration = Duration::from_secs(3600);

#[derive(Debug, QueryableByName)]
struct Member {
    #[diesel(sql_type = Text)]
    advertise: String,
}

impl Persistence {
    /// Marks `advertise` seen now and returns every member seen within
    /// `live` (itself included), sorted.
    pub async fn announce_member(
        &self,
        advertise: &str,
        live: Duration,
    ) -> Result<Vec<String>, DatabaseError> {
        let advertise = advertise.to_string();
        self.unfenced("members_announce", move |c| {
            let c = pg(c)?;
            diesel::sql_query(
                "INSERT INTO coordinator_members (advertise, seen_at) VALUES ($1, now()) \
                 ON CONFLICT (advertise) DO UPDATE SET seen_at = now()",
            )
            .bind::<Text, _>(&advertise)
            .execute(c)?;
            diesel::sql_query(
                "DELETE FROM coordinator_members \
                 WHERE seen_at < now() - make_interval(secs => $1)",
            )
            .bind::<Double, _>(FORGET_AFTER.as_secs_f64())
            .execute(c)?;
            let members: Vec<Member> = diesel::sql_query(
                "SELECT advertise FROM coordinator_members \
                 WHERE seen_at > now() - make_interval(secs => $1) ORDER BY advertise",
            )
            .bind::<Double, _>(live.as_secs_f64())
            .load(c)?;
            Ok(members.into_iter().map(|m| m.advertise).collect())
        })
        .await
    }

    /// Leaves the member set (a graceful stop).
    pub async fn forget_member(&self, advertise: &str) -> Result<(), DatabaseError> {
        let advertise = advertise.to_string();
        self.unfenced("members_forget", move |c| {
            diesel::sql_query("DELETE FROM coordinator_members WHERE advertise = $1")
                .bind::<Text, _>(&advertise)
                .execute(pg(c)?)?;
            Ok(())
        })
        .await
    }
}
