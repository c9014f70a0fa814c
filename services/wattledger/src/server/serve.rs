//! The connection loop: the router on hyper, with what `axum::serve` leaves unset.
//!
//! - A deadline for a request's headers: without one, a client that opens a connection and
//!   trickles its headers (or sends none) holds it forever (hyper enforces the limit only
//!   with a timer, which axum's loop does not give it).
//! - The client's address as a `ConnectInfo` extension, for the sign-in throttle, and
//!   [`ViaTls`] on requests that came over the HTTPS listener (the admission webhook's).
//! - Graceful shutdown: on the signal, accepting stops and open requests finish.
//! - Optionally a second, HTTPS listener (the Kubernetes admission webhook), serving the same
//!   router under the same rules, with a deadline for the TLS handshake as well.

use axum::extract::ConnectInfo;
use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use hyper_util::server::graceful::{GracefulShutdown, Watcher};
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;
use tower::ServiceExt;

/// A request extension: the request came over the HTTPS listener.
#[derive(Debug, Clone, Copy)]
pub struct ViaTls;

/// How long a client has to send a request's headers, and to finish a TLS handshake.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// How long open requests may take to finish once shutdown begins.
const DRAIN: Duration = Duration::from_secs(20);

/// Serves `router` on `listener` (plain HTTP) and, when given, on an HTTPS listener with its
/// TLS acceptor, until `shutdown` resolves.
pub async fn serve(
    listener: TcpListener,
    tls: Option<(TcpListener, TlsAcceptor)>,
    router: Router,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    let graceful = GracefulShutdown::new();
    let mut builder = Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT);
    builder
        .http2()
        .timer(TokioTimer::new())
        .keep_alive_interval(Duration::from_secs(30));
    let builder = Arc::new(builder);
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let (accepted, acceptor) = tokio::select! {
            accepted = listener.accept() => (accepted, None),
            accepted = accept_tls(tls.as_ref()) => accepted,
            () = &mut shutdown => break,
        };
        let (stream, peer) = match accepted {
            Ok(pair) => pair,
            Err(e) => {
                // Out of file descriptors and the like: wait rather than spin.
                tracing::warn!(error = %e, "accepting a connection failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let connection = Connection {
            builder: builder.clone(),
            router: router.clone(),
            // A watcher rather than `graceful.watch`: a TLS connection is handed to hyper
            // only after its handshake, in its own task, and shutdown waits for it too.
            watcher: graceful.watcher(),
            peer,
            tls: acceptor.is_some(),
        };
        tokio::spawn(async move {
            match acceptor {
                None => connection.serve(stream).await,
                Some(acceptor) => connection.handshake(acceptor, stream).await,
            }
        });
    }
    drop(listener);
    drop(tls);
    if tokio::time::timeout(DRAIN, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("open connections did not finish within {DRAIN:?}; closing them");
    }
    Ok(())
}

type Accepted = (
    std::io::Result<(TcpStream, SocketAddr)>,
    Option<TlsAcceptor>,
);

/// The next connection on the HTTPS listener with its acceptor; never, without one.
async fn accept_tls(tls: Option<&(TcpListener, TlsAcceptor)>) -> Accepted {
    match tls {
        Some((listener, acceptor)) => (listener.accept().await, Some(acceptor.clone())),
        None => std::future::pending().await,
    }
}

/// One accepted connection and what serving it needs.
struct Connection {
    builder: Arc<Builder<TokioExecutor>>,
    router: Router,
    watcher: Watcher,
    peer: SocketAddr,
    tls: bool,
}

impl Connection {
    /// Completes the TLS handshake within the deadline, then serves. A failed handshake (a
    /// plain-HTTP client, a scanner, an untrusting client) concerns only this connection,
    /// hence debug level.
    async fn handshake(self, acceptor: TlsAcceptor, stream: TcpStream) {
        let peer = self.peer;
        match tokio::time::timeout(HEADER_READ_TIMEOUT, acceptor.accept(stream)).await {
            Ok(Ok(stream)) => self.serve(stream).await,
            Ok(Err(e)) => tracing::debug!(error = %e, %peer, "TLS handshake failed"),
            Err(_) => tracing::debug!(%peer, "TLS handshake not finished in time"),
        }
    }

    async fn serve(self, stream: impl AsyncRead + AsyncWrite + Unpin + Send + 'static) {
        let Connection {
            builder,
            router,
            watcher,
            peer,
            tls,
        } = self;
        let service = hyper::service::service_fn(move |mut req: hyper::Request<Incoming>| {
            req.extensions_mut().insert(ConnectInfo::<SocketAddr>(peer));
            if tls {
                req.extensions_mut().insert(ViaTls);
            }
            router.clone().oneshot(req)
        });
        let conn = builder
            .serve_connection_with_upgrades(TokioIo::new(stream), service)
            .into_owned();
        if let Err(e) = watcher.watch(conn).await {
            tracing::debug!(error = %e, %peer, "connection ended with an error");
        }
    }
}
