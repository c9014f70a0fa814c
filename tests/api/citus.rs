//! The schema stays distributable: the migrated schema, read from PostgreSQL's catalog, held
//! to Citus's rules for the classification in `deploy/citus/distribute.sql`.
//!
//! Citus is not packaged for this machine, so its rules are checked here rather than by
//! running it: a distributed table's primary keys and unique indexes include its
//! distribution column (each shard can only enforce what it holds); a foreign key between
//! distributed tables pairs the two distribution columns (both rows on one shard); a
//! reference or local table never refers to a distributed one, nor a distributed one to a
//! local one; distributed tables share one distribution column type (co-location); every
//! table is classified once, after the tables it refers to.

use std::collections::{BTreeSet, HashMap};
use wattledger_tests::fresh_db;

#[derive(Debug, Clone, PartialEq)]
enum Class {
    Reference,
    Distributed(String),
    Local,
}

/// The calls of distribute.sql, in order: (table, class).
fn classification() -> Vec<(String, Class)> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../deploy/citus/distribute.sql"
    );
    let text = std::fs::read_to_string(path).unwrap();
    let quoted = |s: &str| -> Vec<String> {
        s.split('\'')
            .skip(1)
            .step_by(2)
            .map(str::to_owned)
            .collect()
    };
    let mut out = Vec::new();
    for line in text.lines().filter(|l| l.starts_with("SELECT ")) {
        let args = quoted(line);
        let class = if line.contains("create_reference_table(") {
            Class::Reference
        } else if line.contains("create_distributed_table(") {
            Class::Distributed(args[1].clone())
        } else if line.contains("citus_add_local_table_to_metadata(") {
            Class::Local
        } else {
            panic!("distribute.sql: a call this test does not know: {line}");
        };
        out.push((args[0].clone(), class));
    }
    out
}

/// Every broken rule, one line each, sorted.
async fn gaps(pool: &sqlx::PgPool) -> BTreeSet<String> {
    let classes = classification();
    let mut gaps = BTreeSet::new();
    let mut class: HashMap<String, Class> = HashMap::new();
    let mut position: HashMap<String, usize> = HashMap::new();
    for (i, (table, c)) in classes.iter().enumerate() {
        if class.insert(table.clone(), c.clone()).is_some() {
            gaps.insert(format!("{table}: classified twice"));
        }
        position.insert(table.clone(), i);
    }

    // The migration runner's own bookkeeping stays on the coordinator and nothing refers to it.
    let tables: Vec<String> = sqlx::query_scalar(
        "SELECT c.relname::text FROM pg_class c
         WHERE c.relnamespace = 'public'::regnamespace AND c.relkind IN ('r', 'p')
           AND NOT c.relispartition AND c.relname <> '_sqlx_migrations'",
    )
    .fetch_all(pool)
    .await
    .unwrap();
    for t in &tables {
        if !class.contains_key(t) {
            gaps.insert(format!(
                "{t}: not classified in deploy/citus/distribute.sql"
            ));
        }
    }
    for t in class.keys() {
        if !tables.contains(t) {
            gaps.insert(format!("{t}: classified but not in the schema"));
        }
    }

    let mut column_types = BTreeSet::new();
    for (table, c) in &classes {
        let Class::Distributed(column) = c else {
            continue;
        };
        let col: Option<(bool, String)> = sqlx::query_as(
            "SELECT a.attnotnull, format_type(a.atttypid, a.atttypmod) FROM pg_attribute a
             WHERE a.attrelid = $1::regclass AND a.attname = $2 AND NOT a.attisdropped",
        )
        .bind(table)
        .bind(column)
        .fetch_optional(pool)
        .await
        .unwrap();
        match col {
            None => {
                gaps.insert(format!(
                    "{table}: distributed by {column}, which it does not have"
                ));
            }
            Some((not_null, ty)) => {
                if !not_null {
                    gaps.insert(format!(
                        "{table}: its distribution column {column} may be NULL"
                    ));
                }
                column_types.insert(ty);
            }
        }
        let unique: Vec<(String, Vec<String>)> = sqlx::query_as(
            "SELECT i.indexrelid::regclass::text,
                    array(SELECT a.attname::text FROM unnest(i.indkey) WITH ORDINALITY k(n, o)
                          JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.n
                          ORDER BY k.o)
             FROM pg_index i WHERE i.indrelid = $1::regclass AND i.indisunique",
        )
        .bind(table)
        .fetch_all(pool)
        .await
        .unwrap();
        for (index, columns) in unique {
            if !columns.contains(column) {
                gaps.insert(format!(
                    "{table}: unique index {index} ({}) lacks {column}",
                    columns.join(", ")
                ));
            }
        }
    }
    if column_types.len() > 1 {
        gaps.insert(format!(
            "distribution columns of several types, so not co-located: {column_types:?}"
        ));
    }

    // (constraint, from table, to table, from columns, to columns)
    type ForeignKey = (String, String, String, Vec<String>, Vec<String>);
    let foreign: Vec<ForeignKey> = sqlx::query_as(
        "SELECT c.conname::text, c.conrelid::regclass::text, c.confrelid::regclass::text,
                array(SELECT a.attname::text FROM unnest(c.conkey) WITH ORDINALITY k(n, o)
                      JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = k.n ORDER BY k.o),
                array(SELECT a.attname::text FROM unnest(c.confkey) WITH ORDINALITY k(n, o)
                      JOIN pg_attribute a ON a.attrelid = c.confrelid AND a.attnum = k.n ORDER BY k.o)
         FROM pg_constraint c
         WHERE c.contype = 'f' AND c.connamespace = 'public'::regnamespace AND c.conparentid = 0",
    )
    .fetch_all(pool)
    .await
    .unwrap();
    for (name, from, to, from_cols, to_cols) in foreign {
        let (Some(fc), Some(tc)) = (class.get(&from), class.get(&to)) else {
            continue; // an unclassified table is a gap already
        };
        if from != to && position[&to] > position[&from] {
            gaps.insert(format!(
                "{from}.{name}: {to} must be classified before {from}"
            ));
        }
        match (fc, tc) {
            (Class::Distributed(fcol), Class::Distributed(tcol)) => {
                let paired = from_cols
                    .iter()
                    .zip(&to_cols)
                    .any(|(f, t)| f == fcol && t == tcol);
                if !paired {
                    gaps.insert(format!(
                        "{from}.{name}: refers to {to} without pairing {fcol} with its {tcol}"
                    ));
                }
            }
            (Class::Distributed(_), Class::Local) => {
                gaps.insert(format!(
                    "{from}.{name}: a distributed table refers to local {to}"
                ));
            }
            (Class::Reference, Class::Distributed(_)) => {
                gaps.insert(format!(
                    "{from}.{name}: a reference table refers to distributed {to}"
                ));
            }
            (Class::Local, Class::Distributed(_)) => {
                gaps.insert(format!(
                    "{from}.{name}: a local table refers to distributed {to}"
                ));
            }
            _ => {}
        }
    }
    gaps
}

#[tokio::test]
async fn the_migrated_schema_keeps_to_citus_rules_for_its_classification() {
    let (pool, _) = fresh_db().await;
    let found = gaps(&pool).await;
    assert!(
        found.is_empty(),
        "a migration broke distributability (or deploy/citus/distribute.sql misses a table):\n{}",
        found
            .iter()
            .map(|s| format!("  {s}"))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// The checks themselves: a schema that breaks each rule is caught.
#[tokio::test]
async fn each_rule_catches_its_own_break() {
    let (pool, _) = fresh_db().await;
    let before = gaps(&pool).await;
    for ddl in [
        // A distributed table's unique key without the site.
        "CREATE UNIQUE INDEX site_hours_by_hour ON site_hours (hour, site_mj)",
        // A reference table referring to a distributed one.
        "ALTER TABLE budgets ADD COLUMN site_id bigint, ADD COLUMN hour timestamptz,
             ADD FOREIGN KEY (site_id, hour) REFERENCES site_hours (site_id, hour)",
        // A table no one classified.
        "CREATE TABLE unclassified (id bigint PRIMARY KEY)",
        // A foreign key between distributed tables that does not pair the sites.
        "ALTER TABLE site_hour_power ADD COLUMN other_site bigint,
             ADD FOREIGN KEY (other_site, hour) REFERENCES site_hours (site_id, hour)",
    ] {
        sqlx::raw_sql(ddl).execute(&pool).await.unwrap();
    }
    let after = gaps(&pool).await;
    let added: Vec<&String> = after.difference(&before).collect();
    let expect = [
        "site_hours: unique index site_hours_by_hour (hour, site_mj) lacks site_id",
        "budgets.budgets_site_id_hour_fkey: a reference table refers to distributed site_hours",
        // ... and a table refers only to tables classified before it.
        "budgets.budgets_site_id_hour_fkey: site_hours must be classified before budgets",
        "unclassified: not classified in deploy/citus/distribute.sql",
        "site_hour_power.site_hour_power_other_site_hour_fkey: refers to site_hours without pairing site_id with its site_id",
    ];
    for e in expect {
        assert!(
            added.iter().any(|a| a.as_str() == e),
            "not caught: {e}\nfound: {added:#?}"
        );
    }
    assert_eq!(added.len(), expect.len(), "{added:#?}");
}
