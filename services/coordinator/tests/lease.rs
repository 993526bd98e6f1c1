//! The leader lease and the write fence on the real PostgreSQL server: two
//! handles on one schema play two coordinators. The lease is taken only
//! when free or expired, on the database's clock; a takeover raises the
//! epoch; the deposed leader's renewal says so and its writes are refused
//! inside their own transaction, leaving nothing behind.

mod common;

use cohort_coordinator::persistence::lease::{Fence, FenceState};
use cohort_coordinator::persistence::{DatabaseError, NewTraining, Persistence};
use std::sync::Arc;
use std::time::Duration;

const SHORT: Duration = Duration::from_millis(300);

fn training(request_id: &str) -> NewTraining {
    common::new_training(Some(request_id))
}

/// A fenced handle leading at `epoch` as `holder`.
fn leading(db: &Persistence, holder: &str, epoch: i64) -> (Persistence, Arc<Fence>) {
    let fence = Arc::new(Fence::default());
    fence.set(FenceState::Leading {
        holder: holder.to_string(),
        epoch,
    });
    (db.clone().fenced(fence.clone()), fence)
}

#[tokio::test]
async fn a_takeover_deposes_the_old_leader_and_fences_its_writes() {
    let pg = common::postgres().await;
    let (a, b) = (
        pg.db.clone(),
        Persistence::open(pg.target.clone()).await.unwrap(),
    );

    let epoch_a = a.campaign("a", "http://a:1", SHORT).await.unwrap();
    assert_eq!(epoch_a, Some(1), "a free lease is taken");
    assert_eq!(
        b.campaign("b", "http://b:1", SHORT).await.unwrap(),
        None,
        "a live lease is not"
    );
    let lease = b.lease().await.unwrap();
    assert_eq!(
        (
            lease.holder.as_str(),
            lease.advertise.as_str(),
            lease.epoch,
            lease.live
        ),
        ("a", "http://a:1", 1, true)
    );
    assert!(a.renew_lease("a", 1, SHORT).await.unwrap());

    // a writes as leader.
    let (fenced_a, _) = leading(&a, "a", 1);
    fenced_a
        .create_training(training("r-1"))
        .await
        .expect("the leader writes");

    // a stops renewing; once the lease runs out, b takes it at epoch 2.
    tokio::time::sleep(SHORT * 2).await;
    assert_eq!(
        b.campaign("b", "http://b:1", SHORT * 10).await.unwrap(),
        Some(2)
    );
    assert!(
        !a.renew_lease("a", 1, SHORT).await.unwrap(),
        "a learns it was deposed"
    );

    // a's writes are refused, in their own transaction: nothing is written.
    let before = common::training_count(&pg).await;
    let refused = fenced_a.create_training(training("r-2")).await.unwrap_err();
    assert!(
        matches!(refused, DatabaseError::Deposed { epoch: 1 }),
        "{refused:?}"
    );
    assert_eq!(common::training_count(&pg).await, before);
    // b, at epoch 2, writes.
    let (fenced_b, _) = leading(&b, "b", 2);
    fenced_b
        .create_training(training("r-2"))
        .await
        .expect("the new leader writes");

    // A standby's fenced handle writes nothing at all.
    let standby = b.clone().fenced(Arc::new(Fence::default()));
    let refused = standby.create_training(training("r-3")).await.unwrap_err();
    assert!(matches!(refused, DatabaseError::NotLeader), "{refused:?}");

    // Given up, the lease is free at once.
    b.release_lease("b", 2).await.unwrap();
    assert_eq!(a.campaign("a", "http://a:1", SHORT).await.unwrap(), Some(3));
}
