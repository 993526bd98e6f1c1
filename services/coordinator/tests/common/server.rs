//! The real coordinator server on 127.0.0.1:0 for one test: started with
//! the test's context, stopped (and awaited, background tasks drained) at
//! the end.

#![allow(dead_code)] // each test binary uses its own part

use cohort_coordinator::context::Context;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tonic::transport::Channel;

pub struct TestServer {
    /// `http://127.0.0.1:<port>`.
    pub url: String,
    /// A channel to it.
    pub channel: Channel,
    stop: oneshot::Sender<()>,
    task: JoinHandle<Result<(), cohort_coordinator::server::ServerError>>,
}

impl TestServer {
    /// Serves `ctx` on a fresh port.
    pub async fn start(ctx: Context) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind 127.0.0.1:0");
        let url = format!("http://{}", listener.local_addr().expect("local addr"));
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(cohort_coordinator::server::run(listener, ctx, async {
            let _ = stopped.await;
        }));
        let channel = cohort_proto::channel(&url).await.expect("connect");
        Self {
            url,
            channel,
            stop,
            task,
        }
    }

    /// Stops the server and waits until it has (a failure panics).
    pub async fn stop(self) {
        let _ = self.stop.send(());
        self.task
            .await
            .expect("the server task")
            .expect("the server stopped cleanly");
    }
}
