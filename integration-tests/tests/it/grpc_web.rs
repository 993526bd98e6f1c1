//! gRPC-Web beside gRPC on the coordinator's one port: what a browser sends
//! (HTTP/1.1, `application/grpc-web+proto` and the base64
//! `application/grpc-web-text`), written byte by byte on a plain TCP
//! connection, gets the same answers and the same error details as a gRPC
//! client.

use cohort_integration_tests::{Backend, Cluster, ClusterOptions};
use cohort_proto::v1;
use prost::Message;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A gRPC-Web answer: its HTTP status, content type, data frames and
/// trailers (lower-case names; a trailers-only answer, an error before any
/// message, carries them as headers).
struct Answer {
    status: u16,
    content_type: String,
    messages: Vec<Vec<u8>>,
    trailers: Vec<(String, String)>,
}

impl Answer {
    fn trailer(&self, name: &str) -> Option<&str> {
        self.trailers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Undoes `Transfer-Encoding: chunked`.
fn dechunk(mut body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let line_end = body
            .windows(2)
            .position(|w| w == b"\r\n")
            .expect("a chunk size");
        let size_text = std::str::from_utf8(&body[..line_end]).unwrap();
        let size = usize::from_str_radix(size_text.split(';').next().unwrap().trim(), 16).unwrap();
        body = &body[line_end + 2..];
        if size == 0 {
            return out;
        }
        out.extend_from_slice(&body[..size]);
        body = &body[size + 2..];
    }
}

/// POSTs one gRPC-Web call over HTTP/1.1 and reads the whole answer.
async fn call(port: u16, method: &str, request: &[u8], text: bool) -> Answer {
    let mut framed = vec![0u8];
    framed.extend_from_slice(&(request.len() as u32).to_be_bytes());
    framed.extend_from_slice(request);
    let (content_type, body) = if text {
        let encoded = base64_encode(&framed);
        ("application/grpc-web-text", encoded.into_bytes())
    } else {
        ("application/grpc-web+proto", framed)
    };
    let head = format!(
        "POST {method} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: {content_type}\r\n\
         X-Grpc-Web: 1\r\nAccept: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(&body).await.unwrap();
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).await.unwrap();
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("headers end");
    let headers = String::from_utf8_lossy(&raw[..split]).to_string();
    let mut body = raw[split + 4..].to_vec();
    let status: u16 = headers.split(' ').nth(1).unwrap().parse().unwrap();
    let header = |name: &str| {
        headers
            .lines()
            .filter_map(|l| l.split_once(':'))
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.trim().to_string())
    };
    if header("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
        body = dechunk(&body);
    }
    if text {
        body = base64_decode(&body);
    }
    let grpc_headers = headers
        .lines()
        .filter_map(|l| l.split_once(':'))
        .filter(|(k, _)| k.to_ascii_lowercase().starts_with("grpc-"))
        .map(|(k, v)| (k.to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let mut answer = Answer {
        status,
        content_type: header("content-type").unwrap_or_default(),
        messages: Vec::new(),
        trailers: grpc_headers,
    };
    let mut rest = body.as_slice();
    while rest.len() >= 5 {
        let flag = rest[0];
        let len = u32::from_be_bytes(rest[1..5].try_into().unwrap()) as usize;
        let payload = &rest[5..5 + len];
        if flag & 0x80 == 0 {
            answer.messages.push(payload.to_vec());
        } else {
            for line in String::from_utf8_lossy(payload).split("\r\n") {
                if let Some((k, v)) = line.split_once(':') {
                    answer
                        .trailers
                        .push((k.trim().to_ascii_lowercase(), v.trim().to_string()));
                }
            }
        }
        rest = &rest[5 + len..];
    }
    answer
}

const B64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

fn base64_encode(bytes: &[u8]) -> String {
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(B64[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Decodes base64, several padded pieces one after another included (a
/// gRPC-Web-text answer encodes its frames separately).
fn base64_decode(text: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    for quad in text.chunks(4).filter(|q| q.len() == 4) {
        let value = |c: u8| B64.iter().position(|&b| b == c).map(|p| p as u32);
        let mut n = 0u32;
        let mut valid = 0;
        for &c in quad {
            n <<= 6;
            if let Some(v) = value(c) {
                n |= v;
                valid += 1;
            }
        }
        let bytes = [(n >> 16) as u8, (n >> 8) as u8, n as u8];
        out.extend_from_slice(&bytes[..valid - 1]);
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_browser_s_grpc_web_calls_get_the_same_answers_on_the_grpc_port() {
    let cluster = Cluster::start(ClusterOptions::new(Backend::Sqlite, 1)).await;
    let empty = v1::ListGpusRequest::default().encode_to_vec();
    for text in [false, true] {
        let answer = call(cluster.port, "/cohort.v1.GpuService/ListGpus", &empty, text).await;
        assert_eq!(answer.status, 200);
        let expected = if text {
            "application/grpc-web-text"
        } else {
            "application/grpc-web+proto"
        };
        assert!(
            answer.content_type.starts_with(expected),
            "{}",
            answer.content_type
        );
        assert_eq!(
            answer.trailer("grpc-status"),
            Some("0"),
            "{:?}",
            answer.trailers
        );
        assert_eq!(answer.messages.len(), 1);
        let gpus = v1::ListGpusResponse::decode(answer.messages[0].as_slice()).unwrap();
        assert_eq!(gpus.gpus.len(), 2, "the agent's two GPUs");
    }

    // An error keeps its code and its google.rpc details.
    let missing = v1::GetTrainingRequest {
        id: "trn-missing".into(),
    }
    .encode_to_vec();
    let answer = call(
        cluster.port,
        "/cohort.v1.TrainingService/GetTraining",
        &missing,
        false,
    )
    .await;
    assert!(answer.messages.is_empty());
    assert_eq!(
        answer.trailer("grpc-status"),
        Some("5"),
        "{:?}",
        answer.trailers
    );
    assert!(
        answer.trailer("grpc-status-details-bin").is_some(),
        "{:?}",
        answer.trailers
    );

    // Native gRPC on the same port still answers.
    assert_eq!(cluster.list_gpus().await.len(), 2);
}
