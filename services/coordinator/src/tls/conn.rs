//! One established TLS connection and what tonic learns about it: the
//! client certificate's identity, read once per connection and put into
//! every request's extensions (tonic's [`Connected`]).

use super::identity_of;
use super::PeerIdentity;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::server::TlsStream;
use tonic::transport::server::Connected;

/// What the auth layer finds in a request's extensions.
#[derive(Debug, Clone)]
pub struct PeerInfo {
    pub remote: SocketAddr,
    /// The verified client certificate's identity; `None` without one.
    pub identity: Option<PeerIdentity>,
    /// The client's certificate chain as presented, leaf first (empty
    /// without one): checked again when `--agent-ca` is reloaded.
    pub chain: std::sync::Arc<Vec<rustls::pki_types::CertificateDer<'static>>>,
}

pub struct TlsConn {
    stream: TlsStream<TcpStream>,
    info: PeerInfo,
}

impl TlsConn {
    pub fn new(stream: TlsStream<TcpStream>, remote: SocketAddr) -> Self {
        // rustls has verified the chain against the client CA; an unusable
        // certificate (no name) counts as none.
        let presented = stream.get_ref().1.peer_certificates().unwrap_or_default();
        let identity = presented
            .first()
            .and_then(|leaf| identity_of(leaf))
            .map(PeerIdentity);
        let chain = std::sync::Arc::new(presented.iter().map(|c| c.clone().into_owned()).collect());
        Self {
            stream,
            info: PeerInfo {
                remote,
                identity,
                chain,
            },
        }
    }
}

impl Connected for TlsConn {
    type ConnectInfo = PeerInfo;

    fn connect_info(&self) -> PeerInfo {
        self.info.clone()
    }
}

impl AsyncRead for TlsConn {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for TlsConn {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }
}
