//! `mcpbootd credentials rekey`: every credential re-encrypted under a new key, with the daemon
//! stopped (it takes the catalog's lock, so a running daemon makes it refuse).
//!
//! Order matters, so that no crash leaves values no key opens: the new key is written to a new
//! file first; then every value is resealed in one transaction; only then does the new key file
//! replace the old one. A crash in between leaves the old key valid (before the commit) or the
//! new key in `<key file>.new` (after it), which the message names.

use std::path::{Path, PathBuf};

use anyhow::Context;

use crate::catalog::Catalog;
use crate::config::Config;
use crate::credentials::vault::{Vault, write_key_file};

/// What a rekey did.
#[derive(Debug)]
pub struct Rekeyed {
    pub credentials: usize,
    /// Where the new key is now.
    pub key_file: PathBuf,
}

/// Re-encrypts every credential of the catalog `config` names. With the key in a key file, the
/// new key replaces it there; with `[credentials] key`, `new_key_file` must say where to write
/// the new one (the configuration is the operator's to change).
pub async fn rekey(config: &Config, new_key_file: Option<&Path>) -> anyhow::Result<Rekeyed> {
    let old = Vault::open(config).context("cannot open the current key")?;
    let target = match (new_key_file, old.key_file()) {
        (Some(path), _) => path.to_path_buf(),
        (None, Some(current)) => current.to_path_buf(),
        (None, None) => anyhow::bail!(
            "the current key comes from [credentials] key (MCPBOOTD_CREDENTIALS_KEY): pass --new-key-file PATH for \
             the new one, then point [credentials] key_file at it"
        ),
    };
    let catalog =
        Catalog::open(&config.catalog.location()?, crate::catalog::Replica::single(), &crate::tasks::Tasks::new())
            .await?;
    let staged = staged_path(&target);
    let (key, new) = Vault::generate(format!("key file {}", target.display()));
    write_key_file(&staged, &key).with_context(|| {
        format!("cannot write the new key to {} (remove it if a rekey was interrupted)", staged.display())
    })?;
    let sealed = catalog.sealed_credentials().await?;
    let mut resealed = Vec::with_capacity(sealed.len());
    for (server, name, value) in sealed {
        let plain = old.open_value(&server, &name, &value)?;
        resealed.push((server.clone(), name.clone(), new.seal(&server, &name, &plain)));
    }
    let mut connections = Vec::new();
    for record in catalog.sealed_connections().await? {
        let name =
            |which: &str| crate::accounts::token_name(&record.credential, &record.issuer, &record.subject, which);
        let access = old.open_value(&record.server_id, &name("access"), &record.sealed_access)?;
        let refresh = match &record.sealed_refresh {
            Some(sealed) => Some(old.open_value(&record.server_id, &name("refresh"), sealed)?),
            None => None,
        };
        connections.push((
            record.id.clone(),
            new.seal(&record.server_id, &name("access"), &access),
            refresh.map(|token| new.seal(&record.server_id, &name("refresh"), &token)),
        ));
    }
    if let Err(error) = catalog.replace_sealed(&resealed, &connections).await {
        let _ = std::fs::remove_file(&staged);
        return Err(error).context("nothing was re-encrypted; the current key still holds");
    }
    catalog.close().await;
    std::fs::rename(&staged, &target).with_context(|| {
        format!(
            "the credentials are re-encrypted under the key in {}, which could not replace {}: move it there by hand",
            staged.display(),
            target.display()
        )
    })?;
    Ok(Rekeyed { credentials: resealed.len(), key_file: target })
}

fn staged_path(target: &Path) -> PathBuf {
    let mut name = target.file_name().map(|n| n.to_os_string()).unwrap_or_default();
    name.push(".new");
    target.with_file_name(name)
}
