//! Test support: a real PostgreSQL, a fresh database per test, and the real app on port 0.
//!
//! With `DATABASE_URL` set (CI), it names a server and a database to connect to for
//! creating test databases; otherwise a private cluster is started (and reused) under the
//! system temp directory from the installed PostgreSQL binaries.
//!
//! With `WATTLEDGER_TEST_CITUS` set, it names a Citus coordinator instead (a database there
//! whose workers are registered, as `../shared/tools/citus-cluster up` prints it), and every
//! test runs on the cluster: each test database is made on the coordinator and on every
//! worker, from a template that `wattledger_store::migrate` distributed once.

pub mod peers;
pub mod process;

pub use process::Killed;

use serde_json::Value;
use sqlx::PgPool;
use std::sync::OnceLock;
use tokio::net::TcpListener;
use wattledger::auth::{Keys, Role};
use wattledger::config::Config;

pub const SECRET: &str = "test-secret-test-secret-test-secret!";

/// The Citus coordinator the suite runs on, if one is given.
pub fn citus() -> Option<&'static str> {
    static URL: OnceLock<Option<String>> = OnceLock::new();
    URL.get_or_init(|| {
        std::env::var("WATTLEDGER_TEST_CITUS")
            .ok()
            .filter(|u| !u.is_empty())
    })
    .as_deref()
}

fn admin_url() -> &'static str {
    static URL: OnceLock<String> = OnceLock::new();
    URL.get_or_init(|| match std::env::var("DATABASE_URL") {
        _ if citus().is_some() => citus().unwrap().to_owned(),
        Ok(url) => url,
        Err(_) => {
            let dir = std::env::temp_dir().join("wattledger-test-pg");
            let pg = wattledger::embedded_pg::EmbeddedPostgres::start(
                &dir,
                &[
                    "fsync=off",
                    "synchronous_commit=off",
                    "full_page_writes=off",
                    "max_connections=200",
                ],
            )
            .expect("start a test PostgreSQL (apt-get install postgresql, or set DATABASE_URL)");
            pg.url("postgres")
        }
    })
}

/// A fresh, migrated database: a copy of this process's template, migrated once.
pub async fn fresh_db() -> (PgPool, String) {
    let admin = admin_url().to_owned();
    static SWEPT: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if !SWEPT.swap(true, std::sync::atomic::Ordering::SeqCst) {
        sweep_left_over(&admin).await;
    }
    let template = template(&admin).await;
    let name = format!(
        "wl_test_{}_{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
            % 1_000_000_000_000
    );
    for node in nodes(&admin).await {
        create_database(&node, &format!("{name} TEMPLATE {template}")).await;
    }
    let url = database_url(&admin, &name);
    let pool = wattledger_store::connect(&url, 5).await.expect("connect");
    // A no-op on the copy (the template holds every migration): kept so a test database is
    // never one migration behind the code.
    wattledger_store::migrate(&pool).await.expect("migrate");
    (pool, url)
}

/// The database every test database is copied from, migrated once per test process instead
/// of once per test (23 migrations, a few hundred ms each time). Named after the process, so
/// `sweep_left_over` drops it with the rest once the process is gone.
async fn template(admin: &str) -> &'static str {
    static TEMPLATE: tokio::sync::OnceCell<String> = tokio::sync::OnceCell::const_new();
    TEMPLATE
        .get_or_init(|| async {
            let name = format!("wl_test_{}_template", std::process::id());
            let nodes = nodes(admin).await;
            for node in &nodes {
                create_database(node, &name).await;
            }
            if citus().is_some() {
                wattledger_store::databases::join(&nodes, &name)
                    .await
                    .expect("join the template to the Citus cluster");
            }
            let url = database_url(admin, &name);
            let pool = wattledger_store::connect(&url, 1).await.expect("connect");
            wattledger_store::migrate(&pool).await.expect("migrate");
            // A template with a session open cannot be copied.
            pool.close().await;
            if citus().is_some() {
                seal(&nodes, &name).await;
            }
            name
        })
        .await
}

/// The admin URLs of the servers a test database lives on: the one server, or a Citus
/// cluster's workers and then its coordinator.
async fn nodes(admin: &str) -> Vec<String> {
    let nodes = wattledger_store::databases::nodes(admin)
        .await
        .expect("the test server's nodes");
    assert!(
        citus().is_none() || nodes.len() > 1,
        "WATTLEDGER_TEST_CITUS names a database without workers: citus-cluster up prints one with them"
    );
    nodes
}

/// Closes the template to new sessions on every node and ends Citus's own (its maintenance
/// daemon and the coordinator's connections to the workers), so that it can be copied.
async fn seal(nodes: &[String], name: &str) {
    use sqlx::Connection;
    for node in nodes {
        let mut conn = sqlx::PgConnection::connect(node)
            .await
            .expect("connect to a Citus node");
        sqlx::query(&format!("ALTER DATABASE {name} ALLOW_CONNECTIONS false"))
            .execute(&mut conn)
            .await
            .expect("ALTER DATABASE … ALLOW_CONNECTIONS false");
        sqlx::query(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
             WHERE datname = $1 AND pid <> pg_backend_pid()",
        )
        .bind(name)
        .execute(&mut conn)
        .await
        .expect("end the template's sessions");
    }
}

/// `CREATE DATABASE {spec}`, retried while its template is being copied by another session
/// (PostgreSQL refuses a copy of a database someone else is using, template1 included).
async fn create_database(admin: &str, spec: &str) {
    use sqlx::Connection;
    for attempt in 0.. {
        let mut conn = sqlx::PgConnection::connect(admin)
            .await
            .expect("connect to the test server");
        match sqlx::query(&format!("CREATE DATABASE {spec}"))
            .execute(&mut conn)
            .await
        {
            Ok(_) => return,
            Err(e) if attempt < 50 => {
                tracing_free_sleep(attempt, &e).await;
            }
            Err(e) => panic!("CREATE DATABASE failed: {e}"),
        }
    }
}

fn database_url(admin: &str, name: &str) -> String {
    wattledger_store::databases::url_of(admin, name)
}

/// Drops the databases earlier test processes left behind (one per test, named after the
/// process): without this the test server's disk grows with every run.
async fn sweep_left_over(admin: &str) {
    use sqlx::Connection;
    for node in nodes(admin).await {
        let Ok(mut conn) = sqlx::PgConnection::connect(&node).await else {
            continue;
        };
        let names: Vec<String> = sqlx::query_scalar(
            "SELECT datname FROM pg_database WHERE datname LIKE 'wl\\_test\\_%'",
        )
        .fetch_all(&mut conn)
        .await
        .unwrap_or_default();
        let me = std::process::id();
        for name in names {
            let pid = name.split('_').nth(2).and_then(|p| p.parse::<u32>().ok());
            let gone = pid
                .is_some_and(|p| p != me && !std::path::Path::new(&format!("/proc/{p}")).exists());
            if gone {
                let _ = sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                    .execute(&mut conn)
                    .await;
            }
        }
    }
}

async fn tracing_free_sleep(attempt: u32, _e: &sqlx::Error) {
    tokio::time::sleep(std::time::Duration::from_millis(
        50 + 20 * u64::from(attempt),
    ))
    .await;
}

/// The real app on a loopback port, against a fresh database.
pub struct TestApp {
    pub base: String,
    pub pool: PgPool,
    pub db_url: String,
    pub keys: Keys,
    pub http: reqwest::Client,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl TestApp {
    pub async fn start() -> Self {
        Self::start_with(|_| {}).await
    }

    pub async fn start_with(tweak: impl FnOnce(&mut Config)) -> Self {
        let (pool, db_url) = fresh_db().await;
        let mut config = Config::for_tests(db_url.clone(), SECRET.into());
        tweak(&mut config);
        Self::serve(pool, db_url, config).await
    }

    /// A server already running at `base` (another process) on the database `db_url`.
    pub fn attach(base: &str, pool: PgPool, db_url: &str) -> Self {
        TestApp {
            base: base.to_owned(),
            pool,
            db_url: db_url.to_owned(),
            keys: Keys::new(SECRET.as_bytes()).unwrap(),
            http: reqwest::Client::new(),
            stop: None,
        }
    }

    /// The app on a pool the caller made (through a proxy that can stall, say), for the
    /// database `db_url`.
    pub async fn start_on(pool: PgPool, db_url: String) -> Self {
        let config = Config::for_tests(db_url.clone(), SECRET.into());
        Self::serve(pool, db_url, config).await
    }

    /// A second server on the same database, as another replica behind a load balancer.
    pub async fn replica(&self) -> Self {
        let config = Config::for_tests(self.db_url.clone(), SECRET.into());
        Self::serve(self.pool.clone(), self.db_url.clone(), config).await
    }

    async fn serve(pool: PgPool, db_url: String, config: Config) -> Self {
        let keys = Keys::new(SECRET.as_bytes()).unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(wattledger::startup::serve(
            pool.clone(),
            keys.clone(),
            config,
            listener,
            async {
                let _ = rx.await;
            },
        ));
        TestApp {
            base,
            pool,
            db_url,
            keys,
            http: reqwest::Client::new(),
            stop: Some(tx),
        }
    }

    pub fn token(&self, role: Role) -> String {
        self.keys.mint("test", role, None, 600).unwrap()
    }

    pub fn tenant_token(&self, tenant: &str) -> String {
        self.keys
            .mint("test", Role::Tenant, Some(tenant), 600)
            .unwrap()
    }

    /// POSTs `{"records": records}` and returns (status, body).
    pub async fn ingest(&self, token: &str, what: &str, records: Value) -> (u16, Value) {
        self.post_raw(
            token,
            &format!("/v1/ingest/{what}"),
            serde_json::json!({ "records": records }).to_string(),
        )
        .await
    }

    pub async fn post_raw(&self, token: &str, path: &str, body: String) -> (u16, Value) {
        self.send(reqwest::Method::POST, token, path, body).await
    }

    pub async fn put(&self, token: &str, path: &str, body: Value) -> (u16, Value) {
        self.send(reqwest::Method::PUT, token, path, body.to_string())
            .await
    }

    pub async fn send(
        &self,
        method: reqwest::Method,
        token: &str,
        path: &str,
        body: String,
    ) -> (u16, Value) {
        let (status, _, body) = self.answer(method, token, path, body).await;
        (status, body)
    }

    /// [`TestApp::send`] with the answer's headers.
    pub async fn answer(
        &self,
        method: reqwest::Method,
        token: &str,
        path: &str,
        body: String,
    ) -> (u16, reqwest::header::HeaderMap, Value) {
        let r = self
            .http
            .request(method, format!("{}{path}", self.base))
            .bearer_auth(token)
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        let headers = r.headers().clone();
        (status, headers, r.json().await.unwrap_or(Value::Null))
    }

    pub async fn get(&self, token: Option<&str>, path: &str) -> (u16, Value) {
        let mut req = self.http.get(format!("{}{path}", self.base));
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        let r = req.send().await.unwrap();
        let status = r.status().as_u16();
        (status, r.json().await.unwrap_or(Value::Null))
    }

    /// Attributes every dirty hour now.
    pub async fn attribute(&self) -> wattledger::app::attribution::RunStats {
        wattledger::worker::drain(&self.pool, |_| {}).await.unwrap()
    }
}

impl Drop for TestApp {
    fn drop(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
    }
}
