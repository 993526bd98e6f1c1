//! The opt-in Prometheus scrape endpoint (`--metrics-listen`): `GET /metrics`
//! over a minimal HTTP/1.1 server on a tokio listener (one request per
//! connection, answered with `Connection: close`). See [`render`] for what
//! is exported.
//!
//! Scrapes are not authenticated, so what they show depends on who can
//! reach the listener: on a loopback address every series carries the
//! `training_id` holding its GPU; on any other address that label is empty
//! unless the operator opts in (`--metrics-training-labels`), so training
//! ids do not leak to whoever can reach the port. At most
//! [`MAX_CONNECTIONS`] scrapes are served at once; more wait to be accepted.

pub mod render;

use crate::context::Context;
use std::future::Future;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The longest request head read.
const MAX_HEAD: usize = 16 * 1024;
/// How long a client may take to send its request.
const READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Scrape connections served at once.
pub const MAX_CONNECTIONS: usize = 64;
/// The content type of the text exposition format.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Serves scrapes until `shutdown` completes, with training ids in the
/// labels only on a loopback listener.
pub async fn serve(listener: TcpListener, ctx: Context, shutdown: impl Future<Output = ()>) {
    let loopback = listener.local_addr().is_ok_and(|a| a.ip().is_loopback());
    serve_exposing(listener, ctx, shutdown, loopback).await
}

/// Serves scrapes until `shutdown` completes; `training_labels` says
/// whether series name the training holding their GPU.
pub async fn serve_exposing(
    listener: TcpListener,
    ctx: Context,
    shutdown: impl Future<Output = ()>,
    training_labels: bool,
) {
    tracing::info!(addr = ?listener.local_addr().ok(), training_labels, "serving Prometheus metrics");
    let slots = std::sync::Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    tokio::pin!(shutdown);
    loop {
        let Ok(slot) = slots.clone().acquire_owned().await else {
            return;
        };
        tokio::select! {
            _ = &mut shutdown => return,
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    let ctx = ctx.clone();
                    tokio::spawn(async move {
                        let _slot = slot;
                        if let Err(e) = handle(stream, &ctx, training_labels).await {
                            tracing::debug!(peer = %peer, error = %e, "metrics connection failed");
                        }
                    });
                }
                Err(e) => {
                    tracing::warn!(error = %e, "metrics listener cannot accept");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            },
        }
    }
}

/// Reads the request head (up to the blank line).
async fn read_head(stream: &mut TcpStream) -> std::io::Result<Option<String>> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    loop {
        if buf.windows(4).any(|w| w == b"\r\n\r\n") || buf.windows(2).any(|w| w == b"\n\n") {
            return Ok(Some(String::from_utf8_lossy(&buf).into_owned()));
        }
        if buf.len() > MAX_HEAD {
            return Ok(None);
        }
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Ok(None);
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

async fn handle(
    mut stream: TcpStream,
    ctx: &Context,
    training_labels: bool,
) -> std::io::Result<()> {
    let head = match tokio::time::timeout(READ_TIMEOUT, read_head(&mut stream)).await {
        Ok(head) => head?,
        Err(_) => return Ok(()),
    };
    let Some(head) = head else {
        return respond(
            &mut stream,
            "400 Bad Request",
            "text/plain",
            "bad request\n",
            &[],
        )
        .await;
    };
    let mut parts = head.lines().next().unwrap_or("").split_whitespace();
    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let path = target.split('?').next().unwrap_or("");
    match (method, path) {
        ("GET", "/metrics") => {
            let body = render::render(ctx, training_labels).await;
            respond(&mut stream, "200 OK", CONTENT_TYPE, &body, &[]).await
        }
        (_, "/metrics") => {
            respond(
                &mut stream,
                "405 Method Not Allowed",
                "text/plain",
                "only GET\n",
                &[("Allow", "GET")],
            )
            .await
        }
        ("", _) => {
            respond(
                &mut stream,
                "400 Bad Request",
                "text/plain",
                "bad request\n",
                &[],
            )
            .await
        }
        _ => {
            respond(
                &mut stream,
                "404 Not Found",
                "text/plain",
                "metrics are at /metrics\n",
                &[],
            )
            .await
        }
    }
}

async fn respond(
    stream: &mut TcpStream,
    status: &str,
    content_type: &str,
    body: &str,
    headers: &[(&str, &str)],
) -> std::io::Result<()> {
    let mut head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).await?;
    stream.write_all(body.as_bytes()).await?;
    stream.shutdown().await
}
