//! The agent among several coordinators: a standby's NOT_LEADER answer sends
//! it to the leader; a session of an older leader epoch than one already
//! seen is refused, and so is a message carrying an older epoch than its
//! session's; rank events the coordinator did not acknowledge are sent
//! again, first, in the next session; a published member set is dialled
//! and kept in the work dir for the next run.

mod common;

use cohort_proto::v1;
use cohort_proto::v1::agent_message::Message as Out;
use cohort_proto::v1::coordinator_message::Message as In;
use cohort_proto::v1::rank_event::Kind;
use common::*;
use tokio::net::TcpListener;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_sends_the_agent_to_the_leader_and_older_leaders_are_refused() {
    let work = tempfile::tempdir().unwrap();
    let program = script(work.path(), RANK_SCRIPT);
    let leader = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let leader_url = format!("http://{}", leader.local_addr().unwrap());
    let mut sessions = serve(leader).await;
    let standby = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let standby_url = format!("http://{}", standby.local_addr().unwrap());
    serve_standby(standby, leader_url).await;

    // Told only the standby, the agent reaches the leader through it.
    let (agent, stop) = start_agent(standby_url, work.path(), program);
    let mut session = next_session(&mut sessions).await;
    session.register_at_epoch(5).await;
    session
        .next_matching(|m| matches!(m, Out::Heartbeat(_)).then_some(()))
        .await;
    drop(session);

    // A deposed leader (epoch 3 < 5) gets no session.
    let mut stale = next_session(&mut sessions).await;
    stale.register_at_epoch(3).await;
    assert!(
        stale.ended_by_agent().await,
        "the agent ends a stale leader's session"
    );

    // A newer leader does.
    let mut newer = next_session(&mut sessions).await;
    newer.register_at_epoch(6).await;
    newer
        .next_matching(|m| matches!(m, Out::Heartbeat(_)).then_some(()))
        .await;
    // Its commands carry its epoch and are obeyed; one that carries an
    // older epoch than the session's is refused and the session ends.
    newer.send(In::Ack(v1::Ack { through: 0 })).await;
    newer
        .next_matching(|m| matches!(m, Out::Heartbeat(_)).then_some(()))
        .await;
    newer
        .send_at_epoch(In::Ack(v1::Ack { through: 0 }), 5)
        .await;
    assert!(
        newer.ended_by_agent().await,
        "the agent ends a session whose message carries an older epoch"
    );
    let mut again = next_session(&mut sessions).await;
    again.register_at_epoch(6).await;
    again
        .next_matching(|m| matches!(m, Out::Heartbeat(_)).then_some(()))
        .await;
    stop.send(true).unwrap();
    agent.await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unacknowledged_rank_events_are_sent_again_first() {
    let work = tempfile::tempdir().unwrap();
    let program = script(work.path(), RANK_SCRIPT);
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let mut sessions = serve(listener).await;
    let (agent, stop) = start_agent(url, work.path(), program);

    let mut first = next_session(&mut sessions).await;
    first.register().await;
    first.send(start_ranks("job-1", &[(0, 0), (1, 1)], 2)).await;
    // Two starts and two progress lines, numbered from 1.
    let mut events = Vec::new();
    while events.len() < 4 {
        events.push(first.next_rank_event().await);
    }
    let mut numbers: Vec<u64> = events.iter().map(|e| e.delivery).collect();
    numbers.sort();
    assert_eq!(numbers, vec![1, 2, 3, 4]);
    // Only the first is acknowledged before the coordinator goes away.
    first.send(In::Ack(v1::Ack { through: 1 })).await;
    // (The ack is read before the session ends: a heartbeat after it.)
    first
        .next_matching(|m| matches!(m, Out::Heartbeat(_)).then_some(()))
        .await;
    drop(first);

    let mut second = next_session(&mut sessions).await;
    let register = second.register().await;
    assert_eq!(register.running_ranks.len(), 2, "the ranks kept running");
    let mut again = Vec::new();
    while again.len() < 3 {
        again.push(second.next_rank_event().await);
    }
    let resent: Vec<u64> = again.iter().map(|e| e.delivery).collect();
    assert_eq!(resent, vec![2, 3, 4], "the unacknowledged, in order");
    assert!(again
        .iter()
        .all(|e| matches!(e.kind, Some(Kind::Started(_)) | Some(Kind::Progress(_)))));
    second.send(In::Ack(v1::Ack { through: 4 })).await;
    second
        .next_matching(|m| matches!(m, Out::Heartbeat(_)).then_some(()))
        .await;
    drop(second);

    // Everything acknowledged: the third session starts with no replay.
    let mut third = next_session(&mut sessions).await;
    third.register().await;
    if let Some(Out::RankEvent(e)) = third.next().await.message {
        panic!("replayed an acknowledged event: {e:?}");
    }
    stop.send(true).unwrap();
    agent.await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_published_member_set_is_dialled_and_kept_for_the_next_run() {
    let work = tempfile::tempdir().unwrap();
    let program = script(work.path(), RANK_SCRIPT);
    let a = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let a_url = format!("http://{}", a.local_addr().unwrap());
    let mut a_sessions = serve(a).await;
    // A coordinator the agent was never told of.
    let b = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let b_url = format!("http://{}", b.local_addr().unwrap());
    let mut b_sessions = serve(b).await;

    let (agent, stop) = start_agent(a_url.clone(), work.path(), program.clone());
    let mut first = next_session(&mut a_sessions).await;
    first.register().await;
    first
        .send(In::Members(v1::Members {
            coordinators: vec![a_url.clone(), b_url.clone()],
        }))
        .await;
    let kept = work.path().join("coordinators");
    cohort_testkit::eventually("the member set to be kept", WAIT, || async {
        let text = tokio::fs::read_to_string(&kept).await.unwrap_or_default();
        (text == format!("{b_url}\n")).then_some(()).ok_or(text)
    })
    .await;
    // a goes away (its next session is dropped at once): b is dialled.
    drop(first);
    drop(next_session(&mut a_sessions).await);
    let mut second = next_session(&mut b_sessions).await;
    second.register().await;
    second
        .next_matching(|m| matches!(m, Out::Heartbeat(_)).then_some(()))
        .await;
    drop(second);
    stop.send(true).unwrap();
    agent.await.unwrap();

    // A new run, told only of a dead address, finds b from the kept file.
    let dead = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let dead_url = format!("http://{}", dead.local_addr().unwrap());
    drop(dead);
    let (agent, stop) = start_agent(dead_url, work.path(), program);
    let mut again = next_session(&mut b_sessions).await;
    again.register().await;
    again
        .next_matching(|m| matches!(m, Out::Heartbeat(_)).then_some(()))
        .await;
    stop.send(true).unwrap();
    agent.await.unwrap();
}
