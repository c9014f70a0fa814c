//! The schema stays distributable: the migrated schema, read from PostgreSQL's catalog, held
//! to Citus's rules for the classification in `wattledger_store::distribution::TABLES`, the
//! one `wattledger migrate` places the tables by on a Citus coordinator.
//!
//! CI has no Citus, so the rules a real cluster enforced are checked here (each learnt from a
//! refusal of Citus 13.2 on a coordinator and two workers): a distributed table's primary
//! keys and unique indexes include its distribution column (each shard can only enforce what
//! it holds); a foreign key between distributed tables pairs the two distribution columns
//! (both rows on one shard); a reference or coordinator table never refers to a distributed
//! one, nor a distributed one to a coordinator table; distributed tables share one
//! distribution column type (co-location); every table is classified once, after the tables
//! it refers to; no partitioned table has partitioned partitions ("distributing multi-level
//! partitioned tables is not supported"); no SQL function reads a distributed table ("cannot
//! perform distributed planning … parameterized queries for SQL functions referencing
//! distributed tables"); no trigger on a distributed or reference table. The rules on the
//! server's statements (no volatile or stable function in `ON CONFLICT … DO UPDATE SET`, no
//! row lock across shards) are read from its source, below. `WATTLEDGER_TEST_CITUS` runs the
//! whole API suite on a real cluster.

use std::collections::{BTreeSet, HashMap};
use wattledger_store::distribution::{Placement, SITE_COLUMN, TABLES};
use wattledger_tests::fresh_db;

#[derive(Debug, Clone, PartialEq)]
enum Class {
    Reference,
    Distributed(String),
    Local,
}

/// The classification, in the order `migrate` places the tables: (table, class).
fn classification() -> Vec<(String, Class)> {
    TABLES
        .iter()
        .map(|(t, p)| {
            let class = match p {
                Placement::Reference => Class::Reference,
                Placement::BySite => Class::Distributed(SITE_COLUMN.to_owned()),
                Placement::Coordinator => Class::Local,
            };
            ((*t).to_owned(), class)
        })
        .collect()
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
                "{t}: not classified in store::distribution::TABLES"
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

    // Partitions that are partitioned again.
    let nested: Vec<(String, String)> = sqlx::query_as(
        "SELECT i.inhparent::regclass::text, c.relname::text FROM pg_inherits i
         JOIN pg_class c ON c.oid = i.inhrelid
         WHERE c.relkind = 'p' AND c.relnamespace = 'public'::regnamespace",
    )
    .fetch_all(pool)
    .await
    .unwrap();
    for (parent, child) in nested {
        gaps.insert(format!(
            "{parent}: partition {child} is partitioned again (Citus distributes one level)"
        ));
    }

    // SQL functions that read a distributed table.
    let functions: Vec<(String, String)> = sqlx::query_as(
        "SELECT p.oid::regprocedure::text, p.prosrc FROM pg_proc p
         JOIN pg_language l ON l.oid = p.prolang
         WHERE p.pronamespace = 'public'::regnamespace AND l.lanname = 'sql'",
    )
    .fetch_all(pool)
    .await
    .unwrap();
    for (function, body) in functions {
        let words: BTreeSet<&str> = body
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .collect();
        for (table, c) in &classes {
            if matches!(c, Class::Distributed(_)) && words.contains(table.as_str()) {
                gaps.insert(format!(
                    "{function}: a SQL function reads distributed {table}"
                ));
            }
        }
    }

    // Triggers on tables Citus shards or copies.
    let triggers: Vec<(String, String)> = sqlx::query_as(
        "SELECT t.tgrelid::regclass::text, t.tgname::text FROM pg_trigger t
         WHERE NOT t.tgisinternal",
    )
    .fetch_all(pool)
    .await
    .unwrap();
    for (table, trigger) in triggers {
        if matches!(
            class.get(&table),
            Some(Class::Distributed(_) | Class::Reference)
        ) {
            gaps.insert(format!(
                "{table}: trigger {trigger} on a table Citus shards or copies"
            ));
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
        "a migration broke distributability (or store::distribution::TABLES misses a table):\n{}",
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
    // Each break and what the rules must say of it. On a real cluster
    // (WATTLEDGER_TEST_CITUS) Citus may refuse the break itself: that is the refusal the
    // rule stands for, so a refused break needs no finding.
    let cases: [(&str, &[&str]); 8] = [
        (
            "CREATE UNIQUE INDEX site_hours_by_hour ON site_hours (hour, site_mj)",
            &["site_hours: unique index site_hours_by_hour (hour, site_mj) lacks site_id"],
        ),
        (
            "ALTER TABLE budgets ADD COLUMN site_id bigint, ADD COLUMN hour timestamptz;
             ALTER TABLE budgets ADD FOREIGN KEY (site_id, hour) REFERENCES site_hours (site_id, hour)",
            &[
                "budgets.budgets_site_id_hour_fkey: a reference table refers to distributed site_hours",
                // ... and a table refers only to tables classified before it.
                "budgets.budgets_site_id_hour_fkey: site_hours must be classified before budgets",
            ],
        ),
        (
            "CREATE TABLE unclassified (id bigint PRIMARY KEY)",
            &["unclassified: not classified in store::distribution::TABLES"],
        ),
        (
            "ALTER TABLE site_hour_power ADD COLUMN other_site bigint;
             ALTER TABLE site_hour_power ADD FOREIGN KEY (other_site, hour) REFERENCES site_hours (site_id, hour)",
            &["site_hour_power.site_hour_power_other_site_hour_fkey: refers to site_hours without pairing site_id with its site_id"],
        ),
        // Partitions of partitions (samples before migration 0036).
        (
            "CREATE TABLE samples_nested PARTITION OF samples
                 FOR VALUES FROM (false, '2001-01-01') TO (false, '2001-02-01') PARTITION BY LIST (site_id)",
            &["samples: partition samples_nested is partitioned again (Citus distributes one level)"],
        ),
        // A SQL function over a distributed table (ledger_span before migration 0037).
        (
            "CREATE FUNCTION site_total(p_site bigint) RETURNS numeric LANGUAGE sql STABLE
                 AS $$ SELECT sum(total_mj) FROM ledger WHERE site_id = p_site $$",
            &["site_total(bigint): a SQL function reads distributed ledger"],
        ),
        (
            "CREATE FUNCTION touch() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NEW; END $$",
            &[],
        ),
        (
            "CREATE TRIGGER tenants_touch BEFORE UPDATE ON tenants FOR EACH ROW EXECUTE FUNCTION touch()",
            &["tenants: trigger tenants_touch on a table Citus shards or copies"],
        ),
    ];
    let on_citus = wattledger_tests::citus().is_some();
    let mut expect = Vec::new();
    for (ddl, finds) in cases {
        match sqlx::raw_sql(ddl).execute(&pool).await {
            Ok(_) => expect.extend_from_slice(finds),
            Err(e) if on_citus => eprintln!("refused by the cluster, as the rule says: {e}"),
            Err(e) => panic!("{ddl}: {e}"),
        }
    }
    let after = gaps(&pool).await;
    let added: Vec<&String> = after.difference(&before).collect();
    for e in &expect {
        assert!(
            added.iter().any(|a| a.as_str() == *e),
            "not caught: {e}\nfound: {added:#?}"
        );
    }
    assert_eq!(added.len(), expect.len(), "{added:#?}");
    if !on_citus {
        assert_eq!(expect.len(), 8, "every break applies on plain PostgreSQL");
    }
}

/// The string literals of a Rust source file (plain and raw), where the server's SQL lives.
fn string_literals(source: &str) -> Vec<String> {
    let b = source.as_bytes();
    let (mut out, mut i) = (Vec::new(), 0);
    while i < b.len() {
        match b[i] {
            b'/' if b.get(i + 1) == Some(&b'/') => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            // A character literal, `'"'` or `'\''` among them.
            b'\'' if b.get(i + 2) == Some(&b'\'') => i += 3,
            b'\'' if b.get(i + 1) == Some(&b'\\') && b.get(i + 3) == Some(&b'\'') => i += 4,
            b'r' if b.get(i + 1) == Some(&b'#') || b.get(i + 1) == Some(&b'"') => {
                let hashes = b[i + 1..].iter().take_while(|&&c| c == b'#').count();
                if b.get(i + 1 + hashes) != Some(&b'"') {
                    i += 1;
                    continue;
                }
                let close = format!("\"{}", "#".repeat(hashes));
                let start = i + 2 + hashes;
                let end = source[start..].find(&close).map_or(b.len(), |e| start + e);
                out.push(source[start..end].to_owned());
                i = end + close.len();
            }
            b'"' => {
                let mut j = i + 1;
                while j < b.len() && b[j] != b'"' {
                    j += if b[j] == b'\\' { 2 } else { 1 };
                }
                out.push(source[i + 1..j.min(b.len())].to_owned());
                i = j + 1;
            }
            _ => i += 1,
        }
    }
    out
}

/// The Citus rules a statement breaks: a function that is not IMMUTABLE in `ON CONFLICT … DO
/// UPDATE SET … WHERE …` (time arithmetic included: `timestamptz ± interval` is STABLE), refused on
/// every table Citus knows; and a row lock on a distributed table without the site bound
/// (Citus takes row locks on one shard only).
fn statement_breaks(sql: &str) -> Vec<String> {
    let upper = sql.to_uppercase();
    let mut out = Vec::new();
    if let Some(at) = upper.find("DO UPDATE SET") {
        let rest = &upper[at..];
        // The conflict action's WHERE too: Citus refuses those functions there as well.
        let end = rest.find("RETURNING").unwrap_or(rest.len());
        for f in [
            "NOW()",
            "CLOCK_TIMESTAMP()",
            "CURRENT_TIMESTAMP",
            "RANDOM()",
            "NEXTVAL(",
            "INTERVAL",
        ] {
            if rest[..end].contains(f) {
                out.push(format!("DO UPDATE SET uses {f}"));
            }
        }
    }
    let locks = [
        "FOR UPDATE",
        "FOR NO KEY UPDATE",
        "FOR SHARE",
        "FOR KEY SHARE",
    ]
    .iter()
    .any(|k| upper.contains(k));
    if locks {
        let words: Vec<&str> = sql
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .filter(|w| !w.is_empty())
            .collect();
        let sharded = words.windows(2).any(|w| {
            ["FROM", "JOIN", "UPDATE"].contains(&w[0].to_uppercase().as_str())
                && wattledger_store::distribution::placement_of(w[1]) == Some(Placement::BySite)
        });
        let bound = sql.contains(&format!("{SITE_COLUMN} = $"));
        if sharded && !bound {
            out.push("a row lock on a distributed table without its site bound".to_owned());
        }
    }
    out
}

/// Every statement of the server's and the store's source kept to the statement rules.
#[test]
fn the_servers_statements_keep_to_citus_rules() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../services");
    let mut files = Vec::new();
    let mut dirs = vec![root];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }
    assert!(files.len() > 50, "found only {} source files", files.len());
    let mut found = BTreeSet::new();
    let mut statements = 0;
    for file in &files {
        for sql in string_literals(&std::fs::read_to_string(file).unwrap()) {
            statements += 1;
            for b in statement_breaks(&sql) {
                found.insert(format!("{}: {b}: {}", file.display(), sql.trim()));
            }
        }
    }
    assert!(statements > 500, "read only {statements} string literals");
    assert!(found.is_empty(), "{:#?}", found);
}

/// The statement rules catch what the cluster refused, and pass what it ran.
#[test]
fn each_statement_rule_catches_its_own_break() {
    let breaks = |sql: &str| statement_breaks(sql);
    assert_eq!(
        breaks("INSERT INTO tenants (key, name) VALUES ($1, $2) ON CONFLICT (key) DO UPDATE SET name = excluded.name, updated_at = now()"),
        ["DO UPDATE SET uses NOW()"]
    );
    assert_eq!(
        breaks("INSERT INTO dirty_hours (site_id, hour) VALUES ($1, $2) ON CONFLICT (site_id, hour) DO UPDATE SET marked_at = clock_timestamp() RETURNING hour"),
        ["DO UPDATE SET uses CLOCK_TIMESTAMP()"]
    );
    assert_eq!(
        breaks("INSERT INTO login_failures VALUES ($1, $2, 1, now()) ON CONFLICT (kind, key) DO UPDATE SET failures = CASE WHEN login_failures.last_failure_at < excluded.last_failure_at - interval '1 hour' THEN 1 END"),
        ["DO UPDATE SET uses INTERVAL"]
    );
    assert_eq!(
        breaks("INSERT INTO t VALUES ($1) ON CONFLICT (id) DO UPDATE SET n = excluded.n WHERE t.at < now()"),
        ["DO UPDATE SET uses NOW()"]
    );
    assert_eq!(
        breaks("WITH first AS (SELECT site_id, hour FROM dirty_hours ORDER BY hour LIMIT 1) SELECT d.hour FROM dirty_hours d, first f WHERE d.site_id = f.site_id FOR UPDATE OF d SKIP LOCKED"),
        ["a row lock on a distributed table without its site bound"]
    );
    // What the cluster runs: the default's value through `excluded`, a time in RETURNING, a
    // lock on one site, a lock on a coordinator table.
    for ok in [
        "INSERT INTO tenants (key, name) VALUES ($1, $2) ON CONFLICT (key) DO UPDATE SET updated_at = excluded.updated_at WHERE tenants.name IS DISTINCT FROM excluded.name RETURNING now()",
        "SELECT d.hour FROM dirty_hours d WHERE d.site_id = $2 FOR UPDATE OF d SKIP LOCKED",
        "SELECT m.id FROM webhook_messages m WHERE m.due_at <= now() FOR UPDATE OF m SKIP LOCKED",
    ] {
        assert!(breaks(ok).is_empty(), "{ok}: {:?}", breaks(ok));
    }
    assert_eq!(
        string_literals(
            "let c = '\"'; let s = r#\"SELECT \"x\"\"#; // \"no\"\nlet t = \"a\\\"b\";"
        ),
        ["SELECT \"x\"", "a\\\"b"]
    );
}
