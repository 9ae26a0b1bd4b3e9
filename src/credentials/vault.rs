//! Credential values at rest: sealed with XChaCha20-Poly1305 (RustCrypto) under a 256-bit key
//! that never enters the catalog.
//!
//! The key comes from `[credentials] key` (`MCPBOOTD_CREDENTIALS_KEY`) or `key_file`; without
//! either, `<catalog path>.key` is used, and created with mode 0600 on first start. Each value
//! gets a fresh random 192-bit nonce, and the server id and credential name are authenticated
//! with it, so a sealed value copied to another server or name does not open. A catalog opened
//! with another key fails with an error naming the key in use, never with garbage.

use std::io::Write;
use std::path::{Path, PathBuf};

use chacha20poly1305::aead::{Aead, AeadCore, KeyInit, OsRng, Payload};
use chacha20poly1305::{Key, XChaCha20Poly1305, XNonce};

use crate::config::Config;

const KEY_BYTES: usize = 32;
const NONCE_BYTES: usize = 24;

/// The cipher for credential values, with where its key came from (for messages).
#[derive(Clone)]
pub struct Vault {
    cipher: XChaCha20Poly1305,
    /// Where the key came from, named in errors.
    source: String,
    /// The key file, when the key came from one.
    file: Option<PathBuf>,
}

impl std::fmt::Debug for Vault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Vault").field("key", &self.source).finish_non_exhaustive()
    }
}

/// A value that could not be opened.
#[derive(Debug, thiserror::Error)]
#[error(
    "credential {name:?} of server {server:?} cannot be decrypted with the key from {key_source}: the catalog was written \
     under another key (set [credentials] key_file or MCPBOOTD_CREDENTIALS_KEY to the key it was written with), \
     or the row was altered"
)]
pub struct OpenError {
    pub server: String,
    pub name: String,
    pub key_source: String,
}

impl Vault {
    /// The vault for `config`, creating the default key file when no key is configured.
    pub fn open(config: &Config) -> anyhow::Result<Vault> {
        let configured = config.credentials.key.expose().trim();
        if !configured.is_empty() {
            let key = parse_key(configured)
                .map_err(|e| anyhow::anyhow!("[credentials] key (MCPBOOTD_CREDENTIALS_KEY) {e}"))?;
            return Ok(Vault::with_key(&key, "[credentials] key".into()));
        }
        let (path, default) = match &config.credentials.key_file {
            path if path.as_os_str().is_empty() => {
                let location = config.catalog.location().map_err(|e| anyhow::anyhow!("{e}"))?;
                let Some(catalog) = location.sqlite_path() else {
                    anyhow::bail!(
                        "a PostgreSQL catalog needs [credentials] key or key_file (MCPBOOTD_CREDENTIALS_KEY)"
                    );
                };
                (default_key_file(catalog), true)
            }
            path => (path.clone(), false),
        };
        match std::fs::read_to_string(&path) {
            Ok(text) => {
                let key = parse_key(text.trim()).map_err(|e| anyhow::anyhow!("key file {}: {e}", path.display()))?;
                Ok(Vault::from_file(&key, path))
            }
            Err(error) if error.kind() == std::io::ErrorKind::NotFound && default => {
                let key = create_key_file(&path)?;
                tracing::info!(
                    key_file = %path.display(),
                    "created a new key for credentials; back it up with the catalog (a catalog without its key cannot use its credentials)"
                );
                Ok(Vault::from_file(&key, path))
            }
            Err(error) => Err(anyhow::anyhow!(
                "cannot read [credentials] key_file {}: {error}; point key_file at the key the catalog was written with",
                path.display()
            )),
        }
    }

    pub fn with_key(key: &[u8; KEY_BYTES], source: String) -> Vault {
        Vault { cipher: XChaCha20Poly1305::new(&Key::from(*key)), source, file: None }
    }

    fn from_file(key: &[u8; KEY_BYTES], path: PathBuf) -> Vault {
        Vault { file: Some(path.clone()), ..Vault::with_key(key, format!("key file {}", path.display())) }
    }

    /// The key file the key was read from; `None` when it came from `[credentials] key`.
    pub fn key_file(&self) -> Option<&Path> {
        self.file.as_deref()
    }

    /// A new random key, and the vault for it.
    pub fn generate(source: String) -> ([u8; KEY_BYTES], Vault) {
        let key: [u8; KEY_BYTES] = XChaCha20Poly1305::generate_key(&mut OsRng).into();
        (key, Vault::with_key(&key, source))
    }

    /// Seals `value` for credential `name` of server `server`: nonce followed by ciphertext.
    pub fn seal(&self, server: &str, name: &str, value: &str) -> Vec<u8> {
        let nonce = XChaCha20Poly1305::generate_nonce(&mut OsRng);
        let aad = associated_data(server, name);
        let sealed = self
            .cipher
            .encrypt(&nonce, Payload { msg: value.as_bytes(), aad: &aad })
            .expect("XChaCha20-Poly1305 encryption does not fail for in-memory buffers");
        let mut out = Vec::with_capacity(NONCE_BYTES + sealed.len());
        out.extend_from_slice(&nonce);
        out.extend_from_slice(&sealed);
        out
    }

    /// Opens what [`Vault::seal`] produced for the same server and name.
    pub fn open_value(&self, server: &str, name: &str, sealed: &[u8]) -> Result<String, OpenError> {
        let error = || OpenError { server: server.into(), name: name.into(), key_source: self.source.clone() };
        if sealed.len() < NONCE_BYTES {
            return Err(error());
        }
        let (nonce, ciphertext) = sealed.split_at(NONCE_BYTES);
        let nonce: [u8; NONCE_BYTES] = nonce.try_into().map_err(|_| error())?;
        let aad = associated_data(server, name);
        let plain =
            self.cipher.decrypt(&XNonce::from(nonce), Payload { msg: ciphertext, aad: &aad }).map_err(|_| error())?;
        String::from_utf8(plain).map_err(|_| error())
    }
}

fn associated_data(server: &str, name: &str) -> Vec<u8> {
    format!("mcpbootd credential\0{server}\0{name}").into_bytes()
}

/// A fresh secret for a link or an OAuth `state`: 32 random bytes, base64url without padding.
pub fn random_token() -> String {
    use base64::Engine as _;
    use chacha20poly1305::aead::rand_core::RngCore as _;
    let mut bytes = [0u8; 32];
    OsRng.fill_bytes(&mut bytes);
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// `<catalog>.key` beside the catalog file.
pub fn default_key_file(catalog: &Path) -> PathBuf {
    let mut name = catalog.file_name().map(|n| n.to_os_string()).unwrap_or_else(|| "mcpbootd.db".into());
    name.push(".key");
    catalog.with_file_name(name)
}

/// Why a configured key is not a key; the message follows where the key came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
enum InvalidKey {
    #[error("must be {} hex characters", KEY_BYTES * 2)]
    NotHex,
    #[error("must be {} hex characters (a 256-bit key)", KEY_BYTES * 2)]
    WrongLength,
}

fn parse_key(text: &str) -> Result<[u8; KEY_BYTES], InvalidKey> {
    let bytes = hex::decode(text).map_err(|_| InvalidKey::NotHex)?;
    bytes.try_into().map_err(|_| InvalidKey::WrongLength)
}

/// Writes `key` to a new file with mode 0600; fails if the file exists.
pub fn write_key_file(path: &Path, key: &[u8; KEY_BYTES]) -> std::io::Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut file = options.open(path)?;
    file.write_all(format!("{}\n", hex::encode(key)).as_bytes())?;
    file.sync_all()
}

/// A new random key in a new key file (created exclusively, so two daemons starting at once
/// cannot each write their own).
fn create_key_file(path: &Path) -> anyhow::Result<[u8; KEY_BYTES]> {
    let key: [u8; KEY_BYTES] = XChaCha20Poly1305::generate_key(&mut OsRng).into();
    match write_key_file(path, &key) {
        Ok(()) => Ok(key),
        // Another daemon on the same catalog won the race: use its key.
        Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => {
            let text = std::fs::read_to_string(path)?;
            parse_key(text.trim()).map_err(|e| anyhow::anyhow!("key file {}: {e}", path.display()))
        }
        Err(error) => Err(anyhow::anyhow!("cannot create the credentials key file {}: {error}", path.display())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sealed_values_open_only_with_their_key_server_and_name() {
        let vault = Vault::with_key(&[7; 32], "test key".into());
        let sealed = vault.seal("s", "gh", "ghp_value_123");
        assert!(!sealed.windows(5).any(|w| w == b"ghp_v"), "the value is not in the sealed bytes");
        assert_eq!(vault.open_value("s", "gh", &sealed).unwrap(), "ghp_value_123");
        assert_ne!(vault.seal("s", "gh", "ghp_value_123"), sealed, "a fresh nonce every time");
        assert!(vault.open_value("other", "gh", &sealed).is_err(), "bound to the server");
        assert!(vault.open_value("s", "other", &sealed).is_err(), "bound to the name");
        let wrong = Vault::with_key(&[8; 32], "key file /x.key".into());
        let error = wrong.open_value("s", "gh", &sealed).unwrap_err().to_string();
        assert!(error.contains("key file /x.key") && error.contains("MCPBOOTD_CREDENTIALS_KEY"), "{error}");
    }

    #[test]
    fn the_default_key_file_is_created_once_with_mode_0600() {
        let dir = tempfile::tempdir().unwrap();
        let path = default_key_file(&dir.path().join("catalog.db"));
        assert_eq!(path.file_name().unwrap(), "catalog.db.key");
        let key = create_key_file(&path).unwrap();
        assert_eq!(create_key_file(&path).unwrap(), key, "a second start reads the same key");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        }
        assert_eq!(parse_key("abc").unwrap_err().to_string(), "must be 64 hex characters");
        assert_eq!(parse_key("abcd").unwrap_err().to_string(), "must be 64 hex characters (a 256-bit key)");
    }
}
