//! mvproxy's own bearer token toward the local API server, from a file that rotates.
//!
//! A projected ServiceAccount token is replaced by the kubelet before it expires, so the file
//! must be read again now and then; but not on every request: a file read blocks, and on the
//! async runtime (a current-thread one on a single CPU) it stalls every request in flight.
//! As client-go's file token source does (k8s.io/client-go `transport/token_source.go`,
//! `NewCachedFileTokenSource`: the file is read again once its cached content is a minute
//! old), the content is kept and read again at most once per [`REREAD`], off the runtime
//! (`spawn_blocking`). A read that fails after one succeeded keeps the last token (its server
//! says whether it is still good) until a read succeeds again.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long a token read from its file is used before the file is read again.
pub const REREAD: Duration = Duration::from_secs(60);

/// The token file could not be read, and no token was read from it before.
#[derive(Debug, Clone, thiserror::Error)]
#[error("token file {path}: {cause}")]
pub struct BearerError {
    /// The file.
    pub path: String,
    /// Why it could not be read.
    pub cause: String,
}

/// A bearer token file, read at most once per period.
pub struct BearerFile {
    path: PathBuf,
    every: Duration,
    /// The token and when it was read (or last tried).
    cached: tokio::sync::Mutex<Option<(Instant, Arc<str>)>>,
}

impl std::fmt::Debug for BearerFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BearerFile")
            .field("path", &self.path)
            .field("every", &self.every)
            .finish_non_exhaustive()
    }
}

impl BearerFile {
    /// `path`, read again every [`REREAD`].
    pub fn new(path: PathBuf) -> Self {
        Self::every(path, REREAD)
    }

    /// `path`, read again once its content is `every` old.
    pub fn every(path: PathBuf, every: Duration) -> Self {
        Self {
            path,
            every,
            cached: tokio::sync::Mutex::new(None),
        }
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The token (trimmed), read from the file when the one kept is older than the period.
    pub async fn token(&self) -> Result<Arc<str>, BearerError> {
        let mut cached = self.cached.lock().await;
        if let Some((read_at, token)) = cached.as_ref()
            && read_at.elapsed() < self.every
        {
            return Ok(token.clone());
        }
        let path = self.path.clone();
        let read = tokio::task::spawn_blocking(move || std::fs::read_to_string(path)).await;
        let error = |cause: String| BearerError {
            path: self.path.display().to_string(),
            cause,
        };
        let failure = match read {
            Ok(Ok(text)) => {
                let token: Arc<str> = text.trim().into();
                *cached = Some((Instant::now(), token.clone()));
                return Ok(token);
            }
            Ok(Err(e)) => error(e.to_string()),
            Err(e) => error(e.to_string()),
        };
        match cached.as_mut() {
            Some((read_at, token)) => {
                tracing::warn!(error = %failure, "token file could not be read again; the last token read from it is used");
                *read_at = Instant::now();
                Ok(token.clone())
            }
            None => Err(failure),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(dir: &Path, text: &str) -> PathBuf {
        let p = dir.join("token");
        std::fs::write(&p, text).unwrap();
        p
    }

    fn tempdir() -> PathBuf {
        let d = std::env::temp_dir().join(format!(
            "mvproxy-bearer-{}-{}",
            std::process::id(),
            fastrand::u64(..)
        ));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[tokio::test]
    async fn a_token_is_kept_for_its_period_and_then_read_again() {
        let dir = tempdir();
        let path = file(&dir, "first\n");
        let kept = BearerFile::every(path.clone(), Duration::from_secs(3600));
        let fresh = BearerFile::every(path.clone(), Duration::ZERO);
        assert_eq!(&*kept.token().await.unwrap(), "first");
        assert_eq!(&*fresh.token().await.unwrap(), "first");
        // The kubelet rotates it.
        file(&dir, "second\n");
        assert_eq!(
            &*kept.token().await.unwrap(),
            "first",
            "not read on every use"
        );
        assert_eq!(
            &*fresh.token().await.unwrap(),
            "second",
            "read again once due"
        );
        // Gone: the last token is kept; a file never read is an error naming it.
        std::fs::remove_file(&path).unwrap();
        assert_eq!(&*fresh.token().await.unwrap(), "second");
        let never = BearerFile::new(dir.join("missing"));
        let e = never.token().await.unwrap_err();
        assert!(e.to_string().contains("missing"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
