//! `mcpbootd migrate --from sqlite://… --to postgres://…`: copies a catalog into an empty
//! PostgreSQL database (creating its schema) and checks that every table arrived whole.

use anyhow::Context;

use crate::catalog::{Catalog, CatalogLocation, CopiedTable, Replica};
use crate::config::CatalogConfig;
use crate::tasks::Tasks;

/// Where a `--from`/`--to` value points: a catalog URL, or a SQLite file's path.
pub fn location(value: &str) -> anyhow::Result<CatalogLocation> {
    let config = if value.contains("://") || value.starts_with("sqlite:") {
        CatalogConfig { url: value.to_string(), ..CatalogConfig::default() }
    } else {
        CatalogConfig { path: value.into(), ..CatalogConfig::default() }
    };
    Ok(config.location()?)
}

/// Copies `from` into `to`; the counts of each table in both, which the caller has checked equal.
pub async fn migrate(
    from: &CatalogLocation,
    to: &CatalogLocation,
    with_calls: bool,
) -> anyhow::Result<Vec<CopiedTable>> {
    if let CatalogLocation::Sqlite(path) = from
        && !path.exists()
    {
        anyhow::bail!("there is no catalog at {} (--from)", path.display());
    }
    let source = Catalog::open(from, Replica::single(), &Tasks::new())
        .await
        .context("cannot open the catalog to copy (--from)")?;
    let target =
        Catalog::open(to, Replica::single(), &Tasks::new()).await.context("cannot open the target catalog (--to)")?;
    let copied = source.copy_into(&target, with_calls).await;
    source.close().await;
    target.close().await;
    let copied = copied?;
    if let Some(table) = copied.iter().find(|t| t.source_rows != t.target_rows) {
        anyhow::bail!(
            "table {} has {} rows in the source and {} in the target after the copy",
            table.table,
            table.source_rows,
            table.target_rows
        );
    }
    Ok(copied)
}
