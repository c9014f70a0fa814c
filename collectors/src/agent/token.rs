//! The collector token the agent sends: inline, or read from a file and read again whenever
//! the file changes, so that a token rotated under a running agent (a Kubernetes Secret's
//! files swapped by the kubelet, a systemd credential replaced) is sent from the next push on,
//! without a restart.

use std::path::PathBuf;
use std::sync::Mutex;
use std::time::SystemTime;

/// The token to send, and where it comes from.
pub struct Token {
    file: Option<PathBuf>,
    current: Mutex<Current>,
}

struct Current {
    token: String,
    /// The file's modification time and length when `token` was read from it.
    seen: Option<(SystemTime, u64)>,
}

impl Token {
    /// A token given inline (configuration or environment): sent as it is.
    pub fn inline(token: &str) -> Self {
        Token {
            file: None,
            current: Mutex::new(Current {
                token: token.trim().to_owned(),
                seen: None,
            }),
        }
    }

    /// A token read from `path` now (an error if it cannot be: the agent does not start
    /// without a token) and again whenever the file changes.
    pub fn from_file(path: PathBuf) -> std::io::Result<Self> {
        let seen = stamp(&path);
        let token = std::fs::read_to_string(&path)?.trim().to_owned();
        Ok(Token {
            file: Some(path),
            current: Mutex::new(Current { token, seen }),
        })
    }

    /// The token to send now. A file whose modification time or length changed since it was
    /// last read is read again; one that cannot be read (mid-swap, say) leaves the last token
    /// in use, and is tried again at the next call.
    pub fn current(&self) -> String {
        let mut current = self.current.lock().expect("token lock");
        if let Some(path) = &self.file {
            let now = stamp(path);
            if now.is_some() && now != current.seen {
                match std::fs::read_to_string(path) {
                    Ok(t) if !t.trim().is_empty() => {
                        if t.trim() != current.token {
                            tracing::info!(path = %path.display(), "the collector token file changed: sending the new token");
                        }
                        current.token = t.trim().to_owned();
                        current.seen = now;
                    }
                    Ok(_) => {
                        // Not read again until it changes: one warning, not one per push.
                        current.seen = now;
                        tracing::warn!(path = %path.display(), "the collector token file is empty; keeping the last token");
                    }
                    Err(e) => {
                        tracing::warn!(path = %path.display(), error = %e, "the collector token file cannot be read; keeping the last token")
                    }
                }
            }
        }
        current.token.clone()
    }
}

fn stamp(path: &std::path::Path) -> Option<(SystemTime, u64)> {
    let m = std::fs::metadata(path).ok()?;
    Some((m.modified().ok()?, m.len()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rotated_token_file_is_read_again_and_a_vanished_one_keeps_the_last_token() {
        let dir = std::env::temp_dir().join(format!("wl-token-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("token");
        std::fs::write(&path, "first\n").unwrap();
        let token = Token::from_file(path.clone()).unwrap();
        assert_eq!(token.current(), "first");
        // Rotated as the kubelet does it: a new file put in place of the old one.
        let new = dir.join("token.new");
        std::fs::write(&new, "second-token\n").unwrap();
        std::fs::rename(&new, &path).unwrap();
        assert_eq!(token.current(), "second-token");
        std::fs::remove_file(&path).unwrap();
        assert_eq!(token.current(), "second-token");
        std::fs::write(&path, "  \n").unwrap();
        assert_eq!(token.current(), "second-token");
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(Token::inline(" t0k\n").current(), "t0k");
        assert!(Token::from_file(dir.join("missing")).is_err());
    }
}
