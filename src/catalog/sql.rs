//! SQL text the room's modules build: which engine a statement is written for ([`Backend`]),
//! multi-row inserts with numbered placeholders, and status lists.

use crate::states::Status;

/// Which engine holds the catalog.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

impl Backend {
    pub fn name(self) -> &'static str {
        match self {
            Backend::Sqlite => "sqlite",
            Backend::Postgres => "postgres",
        }
    }
}

/// `head` (`INSERT INTO t (a, b, …)`) followed by `VALUES` for `rows` rows of `columns` values,
/// with numbered placeholders: sqlx's query builder writes `?` for the `Any` driver, which
/// PostgreSQL does not accept.
pub fn insert_values(head: &str, columns: usize, rows: usize) -> String {
    use std::fmt::Write;
    let mut sql = String::with_capacity(head.len() + rows * columns * 5 + 8);
    sql.push_str(head);
    sql.push_str(" VALUES ");
    for row in 0..rows {
        sql.push_str(if row == 0 { "(" } else { ", (" });
        for column in 1..=columns {
            let separator = if column == 1 { "" } else { ", " };
            let _ = write!(sql, "{separator}${}", row * columns + column);
        }
        sql.push(')');
    }
    sql
}

/// `'pending', 'fetching'`: statuses as an SQL list (constants from `states`, never user input).
pub fn status_list(statuses: &[Status]) -> String {
    statuses.iter().map(|s| format!("'{s}'")).collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn multi_row_inserts_number_their_placeholders_row_by_row() {
        assert_eq!(
            insert_values("INSERT INTO t (a, b)", 2, 3),
            "INSERT INTO t (a, b) VALUES ($1, $2), ($3, $4), ($5, $6)"
        );
    }
}
