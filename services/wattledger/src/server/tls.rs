//! HTTPS: the server's key pair from PEM files, reloaded when they change.
//!
//! The Kubernetes API server calls admission webhooks only over HTTPS. In a cluster the pair
//! comes from cert-manager: a Secret mounted as files that are rotated in place before the
//! certificate expires, so the files are read again every `reload_every` and a new pair is
//! used for new connections without a restart. A pair that does not load (half written, a key
//! that is not the certificate's) is reported once and the previous pair kept.

use crate::config::KeyPairFiles;
use parking_lot::RwLock;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Weak};
use std::time::Duration;
use tokio_rustls::TlsAcceptor;

/// Why a key pair could not be loaded. The cause is part of the message (not a `source`):
/// a failed reload is logged as one line.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("reading {}: {error}", .path.display())]
    Read {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("{} holds no PEM certificate ({error})", .path.display())]
    NoCertificate {
        path: PathBuf,
        error: rustls::pki_types::pem::Error,
    },
    #[error("{} holds no PEM private key ({error})", .path.display())]
    NoKey {
        path: PathBuf,
        error: rustls::pki_types::pem::Error,
    },
    #[error("the key in {} does not fit the certificate in {}: {error}",
            .files.key.display(), .files.cert.display())]
    Unusable {
        files: KeyPairFiles,
        error: rustls::Error,
    },
    #[error("TLS settings: {0}")]
    Config(rustls::Error),
}

/// The provider reqwest's rustls already uses, named so that none is picked at run time
/// (rustls panics when it cannot tell which one is meant).
fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Loads the pair and serves it on the returned acceptor, reloading it from the files every
/// `reload_every` for as long as the acceptor (or a clone) is alive. Must be called within a
/// Tokio runtime.
pub fn acceptor(files: KeyPairFiles, reload_every: Duration) -> Result<TlsAcceptor, TlsError> {
    let provider = provider();
    let seen = Contents::read(&files);
    let pair = match &seen {
        Ok(contents) => contents.parse(&files, &provider)?,
        Err(e) => return Err(e.to_error()),
    };
    let current = Arc::new(Current(RwLock::new(pair)));
    // TLS 1.2 and 1.3 only (rustls has nothing older); no client certificates: callers
    // authenticate with bearer tokens.
    let mut config = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(TlsError::Config)?
        .with_no_client_auth()
        .with_cert_resolver(current.clone());
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    tokio::spawn(reload(
        files,
        provider,
        Arc::downgrade(&current),
        seen,
        reload_every,
    ));
    Ok(TlsAcceptor::from(Arc::new(config)))
}

/// The pair handed to every handshake; one pair whatever name the client asks for.
#[derive(Debug)]
struct Current(RwLock<Arc<CertifiedKey>>);

impl ResolvesServerCert for Current {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.0.read().clone())
    }
}

/// Checks the files every `every` until the server drops the resolver. A reload is tried
/// only when what the files hold (or why they cannot be read) differs from the last check,
/// so a broken pair is reported once, not every tick.
async fn reload(
    files: KeyPairFiles,
    provider: Arc<CryptoProvider>,
    current: Weak<Current>,
    mut seen: Result<Contents, ReadFailure>,
    every: Duration,
) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        tick.tick().await;
        let Some(current) = current.upgrade() else {
            return;
        };
        let files_now = files.clone();
        let now = match tokio::task::spawn_blocking(move || Contents::read(&files_now)).await {
            Ok(now) => now,
            Err(e) => {
                tracing::warn!(error = %e, "reading the TLS key pair failed");
                continue;
            }
        };
        if now == seen {
            continue;
        }
        seen = now;
        let loaded = match &seen {
            Ok(contents) => contents.parse(&files, &provider),
            Err(e) => Err(e.to_error()),
        };
        match loaded {
            Ok(pair) => {
                *current.0.write() = pair;
                tracing::info!(cert = %files.cert.display(), "TLS certificate reloaded");
            }
            Err(error) => {
                tracing::warn!(%error, "TLS key pair not reloaded; serving the previous one");
            }
        }
    }
}

/// What the two files hold, as bytes: compared between checks, parsed when they change.
#[derive(PartialEq)]
struct Contents {
    cert: Vec<u8>,
    key: Vec<u8>,
}

/// A file that could not be read, kept comparable so the same failure is reported once.
#[derive(PartialEq)]
struct ReadFailure {
    path: PathBuf,
    kind: std::io::ErrorKind,
    message: String,
}

impl ReadFailure {
    fn to_error(&self) -> TlsError {
        TlsError::Read {
            path: self.path.clone(),
            error: std::io::Error::new(self.kind, self.message.clone()),
        }
    }
}

impl Contents {
    fn read(files: &KeyPairFiles) -> Result<Self, ReadFailure> {
        let read = |path: &Path| {
            std::fs::read(path).map_err(|e| ReadFailure {
                path: path.to_owned(),
                kind: e.kind(),
                message: e.to_string(),
            })
        };
        Ok(Contents {
            cert: read(&files.cert)?,
            key: read(&files.key)?,
        })
    }

    fn parse(
        &self,
        files: &KeyPairFiles,
        provider: &CryptoProvider,
    ) -> Result<Arc<CertifiedKey>, TlsError> {
        let chain = CertificateDer::pem_slice_iter(&self.cert)
            .collect::<Result<Vec<_>, _>>()
            .and_then(|chain| {
                if chain.is_empty() {
                    Err(rustls::pki_types::pem::Error::NoItemsFound)
                } else {
                    Ok(chain)
                }
            })
            .map_err(|error| TlsError::NoCertificate {
                path: files.cert.clone(),
                error,
            })?;
        let key = PrivateKeyDer::from_pem_slice(&self.key).map_err(|error| TlsError::NoKey {
            path: files.key.clone(),
            error,
        })?;
        // Also checks that the key is the certificate's: a pair caught half rotated (new
        // certificate, old key) is refused here rather than failing every handshake.
        let pair =
            CertifiedKey::from_der(chain, key, provider).map_err(|error| TlsError::Unusable {
                files: files.clone(),
                error,
            })?;
        Ok(Arc::new(pair))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files(dir: &Path) -> KeyPairFiles {
        KeyPairFiles {
            cert: dir.join("tls.crt"),
            key: dir.join("tls.key"),
        }
    }

    /// The reload loop warns only when what it reads differs from the last check: the same
    /// missing file twice is the same state, and its appearing is a change.
    #[test]
    fn a_failure_is_the_same_state_until_the_files_change() {
        let dir = std::env::temp_dir().join(format!("wattledger-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("tls.crt"), "cert").unwrap();
        let _ = std::fs::remove_file(dir.join("tls.key"));
        let first = Contents::read(&files(&dir));
        let text = first.as_ref().err().unwrap().to_error().to_string();
        assert!(text.contains("tls.key"), "{text}");
        assert!(Contents::read(&files(&dir)) == first);
        std::fs::write(dir.join("tls.key"), "key").unwrap();
        let now = Contents::read(&files(&dir));
        assert!(now.is_ok() && now != first);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn files_without_pem_sections_are_refused() {
        let contents = Contents {
            cert: b"hello".to_vec(),
            key: b"world".to_vec(),
        };
        let dir = PathBuf::from("/nowhere");
        let err = contents.parse(&files(&dir), &provider()).err().unwrap();
        assert!(matches!(err, TlsError::NoCertificate { .. }), "{err}");
    }
}
