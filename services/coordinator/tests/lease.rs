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

/// A leader frozen in the middle of a write transaction (SIGSTOP, a hung
/// host) holds the lease row FOR KEY SHARE, which the takeover (FOR UPDATE)
/// waits for. Without a bound the standby's
/// takeover would wait for that lock until the frozen connection dies,
/// hours later; PostgreSQL ends a coordinator's session idle in a
/// transaction after 3 s, so the takeover comes within the lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_frozen_inside_a_transaction_does_not_block_the_takeover() {
    let pg = common::postgres().await;
    let (a, b) = (
        pg.db.clone(),
        Persistence::open(pg.target.clone()).await.unwrap(),
    );
    assert_eq!(a.campaign("a", "http://a:1", SHORT).await.unwrap(), Some(1));
    let (fenced_a, _) = leading(&a, "a", 1);
    // a's write transaction passes the fence (FOR KEY SHARE), then a "freezes"
    // between two statements for longer than any lease.
    let frozen = tokio::spawn(async move {
        fenced_a
            .transaction("frozen_write", |_| {
                std::thread::sleep(Duration::from_secs(8));
                Ok(())
            })
            .await
    });
    tokio::time::sleep(SHORT * 2).await;
    let started = std::time::Instant::now();
    let epoch = b.campaign("b", "http://b:1", SHORT * 10).await.unwrap();
    let took = started.elapsed();
    assert_eq!(epoch, Some(2), "b takes the expired lease");
    assert!(
        took < Duration::from_secs(5),
        "the takeover waited {took:?} for the frozen leader's lock"
    );
    // The frozen transaction did not commit as leader.
    let _ = frozen.await;
    assert!(!a.renew_lease("a", 1, SHORT).await.unwrap());
}

/// The leader renews every second while its writes are in flight. A renewal
/// must neither wait for a write past the fence nor hold new writes back
/// (with the fence's lock FOR SHARE, it did both: writes stalled every
/// second behind the slowest one in flight). A takeover still waits.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_renewal_does_not_wait_for_writes_in_flight_but_a_takeover_does() {
    let pg = common::postgres().await;
    let (a, b) = (
        pg.db.clone(),
        Persistence::open(pg.target.clone()).await.unwrap(),
    );
    assert_eq!(a.campaign("a", "http://a:1", SHORT).await.unwrap(), Some(1));
    let (fenced_a, _) = leading(&a, "a", 1);
    // A write past the fence that takes `ms` to commit.
    let write_in_flight = |ms: u64| {
        let slow = fenced_a.clone();
        tokio::spawn(async move {
            slow.transaction("slow_write", move |_| {
                std::thread::sleep(Duration::from_millis(ms));
                Ok(())
            })
            .await
        })
    };
    let in_flight = write_in_flight(1500);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let started = std::time::Instant::now();
    assert!(a.renew_lease("a", 1, SHORT * 10).await.unwrap());
    let renewed = started.elapsed();
    // A write begun after the renewal passes the fence at once too.
    let started = std::time::Instant::now();
    fenced_a
        .transaction("quick_write", |_| Ok(()))
        .await
        .unwrap();
    let quick = started.elapsed();
    assert!(
        renewed < Duration::from_millis(500) && quick < Duration::from_millis(500),
        "the renewal took {renewed:?} and a new write {quick:?} beside a write in flight"
    );
    in_flight.await.unwrap().unwrap();

    // A takeover of an expired lease waits for the write in flight.
    tokio::time::sleep(SHORT * 11).await;
    let in_flight = write_in_flight(1000);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let started = std::time::Instant::now();
    assert_eq!(b.campaign("b", "http://b:1", SHORT).await.unwrap(), Some(2));
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(500),
        "the takeover took {took:?}: it did not wait for the write past the fence"
    );
    // That write committed under the old epoch, before the takeover.
    in_flight.await.unwrap().unwrap();
}
