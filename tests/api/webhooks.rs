//! Budget alerts end to end: a crossing written with the ledger, delivered signed to the
//! Standard Webhooks reference library's receiver (`shared/tools/webhook-receiver`) that
//! fails its first attempts, exactly once per threshold however often attribution
//! recomputes, surviving a SIGKILL of the server between the outbox write and the delivery;
//! and the destinations webhooks may not reach.

use crate::agent::{free_port, server_with, wait_healthy, Killed};
use crate::scenario;
use chrono::{DateTime, Utc};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;
use wattledger::auth::Role;
use wattledger_tests::{fresh_db, TestApp};

fn receiver(port: u16, secret: &str, log: &Path, fail_first: u32) -> Killed {
    let tool =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/tools/webhook-receiver");
    assert!(
        tool.exists(),
        "{} (shared/ beside the checkout)",
        tool.display()
    );
    let _ = std::fs::remove_file(log);
    Killed::spawn(
        Command::new(tool)
            .args(["--port", &port.to_string(), "--secret", secret])
            .arg("--log")
            .arg(log)
            .args(["--fail-first", &fail_first.to_string()])
            .stdout(Stdio::null()),
    )
}

/// Waits until something listens on the port (the receiver's venv may be installing).
async fn listening(port: u16) {
    for _ in 0..1200 {
        if tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_ok()
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("nothing listens on {port}");
}

fn deliveries(log: &Path) -> Vec<Value> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

async fn budget(pool: &sqlx::PgPool, tenant: &str, limit_kwh: &str) {
    sqlx::query(
        "INSERT INTO budgets (key, tenant_id, limit_kwh, hard)
         SELECT $1 || '-energy', id, $2::numeric, true FROM tenants WHERE key = $1",
    )
    .bind(tenant)
    .bind(limit_kwh)
    .execute(pool)
    .await
    .unwrap();
}

async fn count(pool: &sqlx::PgPool, table: &str) -> i64 {
    sqlx::query_scalar(&format!("SELECT count(*) FROM {table}"))
        .fetch_one(pool)
        .await
        .unwrap()
}

/// Lets the retry schedule's minutes pass: every pending message is due now.
async fn time_passes(pool: &sqlx::PgPool) {
    sqlx::query("UPDATE webhook_messages SET next_attempt_at = now() WHERE state = 'pending'")
        .execute(pool)
        .await
        .unwrap();
}

async fn register(app: &TestApp, token: &str, url: &str) -> (u16, Value) {
    app.post_raw(
        token,
        "/v1/webhooks/endpoints",
        json!({ "url": url, "description": "budget alerts" }).to_string(),
    )
    .await
}

#[tokio::test]
async fn crossings_arrive_signed_once_through_a_receiver_that_was_down() {
    let app = TestApp::start().await;
    scenario::push(&app, &scenario::batches()).await;
    // Tenant a uses 4.35e9 mJ = 1.208333 kWh in the scenario hour: 80.6 % of 1.5 kWh.
    budget(&app.pool, "a", "1.5").await;
    let port = free_port();
    let (status, created) = register(
        &app,
        &app.tenant_token("a"),
        &format!("http://127.0.0.1:{port}/hooks"),
    )
    .await;
    assert_eq!(status, 201, "{created}");
    let secret = created["secret"].as_str().unwrap();
    assert!(secret.starts_with("whsec_"));
    let endpoint = created["endpoint"]["id"].as_str().unwrap().to_owned();
    // The secret is shown once: never in a read.
    let (_, shown) = app
        .get(
            Some(&app.tenant_token("a")),
            &format!("/v1/webhooks/endpoints/{endpoint}"),
        )
        .await;
    assert!(!shown.to_string().contains(secret));
    // Tenant b cannot see it: not found, as if it did not exist.
    let (status, _) = app
        .get(
            Some(&app.tenant_token("b")),
            &format!("/v1/webhooks/endpoints/{endpoint}"),
        )
        .await;
    assert_eq!(status, 404);

    let log = std::env::temp_dir().join(format!("wl-webhooks-{}.jsonl", std::process::id()));
    let _receiver = receiver(port, secret, &log, 3);
    listening(port).await;

    let stats = app.attribute().await;
    assert_eq!(stats.alerts, 2, "50 % and 80 % of tenant a's kWh");
    assert_eq!(count(&app.pool, "webhook_messages").await, 2);

    // Three failures (500), then the receiver is up: each message delivered once.
    for _ in 0..300 {
        let d = deliveries(&log);
        if d.iter().filter(|r| r["status"] == 204).count() == 2 {
            break;
        }
        time_passes(&app.pool).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let d = deliveries(&log);
    assert!(
        d.iter().all(|r| r["ok"] == true),
        "the reference library verified every signature: {d:?}"
    );
    assert_eq!(d.iter().filter(|r| r["status"] == 500).count(), 3, "{d:?}");
    let delivered: Vec<&Value> = d.iter().filter(|r| r["status"] == 204).collect();
    assert_eq!(delivered.len(), 2, "{d:?}");
    let mut thresholds = Vec::new();
    for ok in &delivered {
        let id = ok["id"].as_str().unwrap();
        assert!(id.starts_with("msg_"));
        // Every attempt of a message carries the same id and the same bytes.
        let attempts: Vec<&Value> = d.iter().filter(|r| r["id"] == id).collect();
        assert!(attempts.iter().all(|r| r["body"] == ok["body"]));
        let body: Value = serde_json::from_str(ok["body"].as_str().unwrap()).unwrap();
        assert_eq!(body["type"], "budget.threshold_crossed");
        assert_eq!(body["data"]["budget"], "a-energy");
        assert_eq!(body["data"]["used"], "1.208333");
        assert_eq!(body["data"]["hard"], true);
        thresholds.push(body["data"]["threshold_pct"].as_i64().unwrap());
    }
    thresholds.sort();
    assert_eq!(thresholds, [50, 80]);

    // Every attempt is recorded and readable by the tenant.
    let (status, messages) = app
        .get(
            Some(&app.tenant_token("a")),
            &format!("/v1/webhooks/endpoints/{endpoint}/messages"),
        )
        .await;
    assert_eq!(status, 200);
    let messages = messages.as_array().unwrap();
    assert!(
        messages.iter().all(|m| m["state"] == "delivered"),
        "{messages:?}"
    );
    let attempts: usize = messages
        .iter()
        .map(|m| m["history"].as_array().unwrap().len())
        .sum();
    assert_eq!(attempts, 5);

    // Recomputing the month does not fire a crossed threshold again.
    let mut tx = app.pool.begin().await.unwrap();
    let from: DateTime<Utc> = scenario::HOUR.parse().unwrap();
    wattledger_store::dirty::mark_range(&mut tx, from, from + chrono::Duration::hours(2))
        .await
        .unwrap();
    tx.commit().await.unwrap();
    let again = app.attribute().await;
    assert!(again.hours >= 1);
    assert_eq!(again.alerts, 0);
    assert_eq!(count(&app.pool, "budget_events").await, 2);
    assert_eq!(count(&app.pool, "webhook_messages").await, 2);

    // A test event on demand, and an admin redelivery as the same message.
    let (status, queued) = app
        .post_raw(
            &app.tenant_token("a"),
            &format!("/v1/webhooks/endpoints/{endpoint}/test"),
            String::new(),
        )
        .await;
    assert_eq!(status, 202, "{queued}");
    let test_id = queued["message_id"].as_str().unwrap().to_owned();
    let (status, _) = app
        .post_raw(
            &app.tenant_token("a"),
            &format!("/v1/webhooks/endpoints/{endpoint}/messages/{test_id}/redeliver"),
            String::new(),
        )
        .await;
    assert_eq!(status, 403, "redelivery is the admin's");
    for _ in 0..100 {
        if deliveries(&log).iter().any(|r| r["id"] == test_id.as_str()) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (status, _) = app
        .post_raw(
            &app.token(Role::Admin),
            &format!("/v1/webhooks/endpoints/{endpoint}/messages/{test_id}/redeliver"),
            String::new(),
        )
        .await;
    assert_eq!(status, 202);
    for _ in 0..100 {
        if deliveries(&log)
            .iter()
            .filter(|r| r["id"] == test_id.as_str())
            .count()
            == 2
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let tests: Vec<Value> = deliveries(&log)
        .into_iter()
        .filter(|r| r["id"] == test_id.as_str())
        .collect();
    assert_eq!(tests.len(), 2, "sent, then redelivered with the same id");
    assert!(tests.iter().all(|r| r["ok"] == true && r["status"] == 204));

    // Rotation: the new secret signs, and the old one beside it for the overlap, so the
    // receiver still holding the old secret verifies the next delivery.
    let (status, rotated) = app
        .post_raw(
            &app.tenant_token("a"),
            &format!("/v1/webhooks/endpoints/{endpoint}/rotate"),
            json!({"overlap_s": 3600}).to_string(),
        )
        .await;
    assert_eq!(status, 200, "{rotated}");
    assert_ne!(rotated["secret"], secret);
    assert!(rotated["endpoint"]["previous_secret_until"].is_string());
    let (_, queued) = app
        .post_raw(
            &app.tenant_token("a"),
            &format!("/v1/webhooks/endpoints/{endpoint}/test"),
            String::new(),
        )
        .await;
    let after = queued["message_id"].as_str().unwrap().to_owned();
    for _ in 0..100 {
        if deliveries(&log).iter().any(|r| r["id"] == after.as_str()) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let d = deliveries(&log);
    let sent = d
        .iter()
        .find(|r| r["id"] == after.as_str())
        .expect("delivered");
    assert_eq!(sent["ok"], true, "the old secret still verifies: {sent}");
    let signatures = sent["headers"]["webhook-signature"].as_str().unwrap();
    assert_eq!(signatures.split(' ').count(), 2, "{signatures}");
}

#[tokio::test]
async fn a_receiver_answering_gone_disables_its_endpoint() {
    let app = TestApp::start().await;
    scenario::push_inventory(&app, &scenario::batches()).await;
    let router = axum::Router::new().fallback(|| async { axum::http::StatusCode::GONE });
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(l, router).await.unwrap() });
    let (_, created) = register(&app, &app.tenant_token("a"), &format!("http://{addr}/")).await;
    let endpoint = created["endpoint"]["id"].as_str().unwrap();
    let path = format!("/v1/webhooks/endpoints/{endpoint}");
    app.post_raw(
        &app.tenant_token("a"),
        &format!("{path}/test"),
        String::new(),
    )
    .await;
    let mut shown = Value::Null;
    for _ in 0..100 {
        shown = app.get(Some(&app.tenant_token("a")), &path).await.1;
        if shown["enabled"] == false {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(shown["enabled"], false, "{shown}");
    assert!(shown["disabled_reason"].as_str().unwrap().contains("410"));
    let (_, messages) = app
        .get(Some(&app.tenant_token("a")), &format!("{path}/messages"))
        .await;
    assert_eq!(messages[0]["state"], "dead");
    assert_eq!(messages[0]["history"][0]["status"], 410);
    // The owner turns it back on.
    let (status, back) = app
        .send(
            reqwest::Method::PATCH,
            &app.tenant_token("a"),
            &path,
            json!({"enabled": true}).to_string(),
        )
        .await;
    assert_eq!(status, 200, "{back}");
    assert_eq!(back["enabled"], true);
    assert!(back["disabled_reason"].is_null());
}

#[tokio::test]
async fn a_crossing_survives_a_sigkill_before_its_delivery() {
    let (pool, db_url) = fresh_db().await;
    let dir = std::env::temp_dir().join(format!("wl-webhooks-kill-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let port = free_port();
    let base = format!("http://127.0.0.1:{port}");
    // First life: the worker attributes, the dispatcher would look only in an hour.
    let first = server(&db_url, port, &dir.join("server-1.log"), "3600000");
    wait_healthy(&base).await;
    let app = TestApp::attach(&base, pool.clone(), &db_url);
    scenario::push_inventory(&app, &scenario::batches()).await;
    budget(&pool, "a", "1.5").await;
    let hook_port = free_port();
    let (status, created) = register(
        &app,
        &app.token(Role::Finance),
        &format!("http://127.0.0.1:{hook_port}/hooks"),
    )
    .await;
    assert_eq!(status, 422, "finance names the tenant: {created}");
    let (status, created) = app
        .post_raw(
            &app.token(Role::Finance),
            "/v1/webhooks/endpoints",
            json!({"tenant": "a", "url": format!("http://127.0.0.1:{hook_port}/hooks"),
                   "event_types": ["budget.threshold_crossed"]})
            .to_string(),
        )
        .await;
    assert_eq!(status, 201, "{created}");
    scenario::push(&app, &scenario::batches()).await;
    for _ in 0..300 {
        if count(&pool, "webhook_messages").await == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(count(&pool, "webhook_messages").await, 2);
    // SIGKILL: the outbox holds the two messages, nothing was sent.
    drop(first);
    let log = dir.join("deliveries.jsonl");
    let _receiver = receiver(hook_port, created["secret"].as_str().unwrap(), &log, 0);
    listening(hook_port).await;
    let _second = server(&db_url, port, &dir.join("server-2.log"), "200");
    for _ in 0..300 {
        if deliveries(&log).len() >= 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let d = deliveries(&log);
    assert_eq!(d.len(), 2, "each delivered once after the restart: {d:?}");
    assert!(d.iter().all(|r| r["ok"] == true && r["status"] == 204));
    assert_ne!(d[0]["id"], d[1]["id"]);
}

fn server(db_url: &str, port: u16, log: &Path, poll_ms: &str) -> Killed {
    server_with(
        db_url,
        port,
        log,
        &[
            ("WATTLEDGER_WEBHOOK_ALLOW", "loopback,http"),
            ("WATTLEDGER_WEBHOOK_POLL_MS", poll_ms),
        ],
    )
}

#[tokio::test]
async fn webhooks_may_not_reach_the_servers_own_network() {
    let app = TestApp::start_with(|c| c.webhook_allow = Default::default()).await;
    scenario::push_inventory(&app, &scenario::batches()).await;
    let mut hostile: Vec<String> = [
        "https://127.0.0.1/",
        "https://[::1]/",
        "https://10.1.2.3/",
        "https://172.20.0.1/",
        "https://192.168.0.1/",
        "https://169.254.169.254/latest/meta-data/",
        "https://localhost:8443/",
        "https://2130706433/",
        "https://0x7f000001/",
        "https://0177.0.0.1/",
        "https://[::ffff:127.0.0.1]/",
        "https://[::ffff:169.254.169.254]/",
        "https://[fd00:ec2::254]/",
        "https://[fe80::1]/",
        "https://0.0.0.0/",
        "https://100.100.100.200/",
        "https://[2002:a9fe:a9fe::]/",
        "http://hooks.example.com/",
        "https://user:secret@hooks.example.com/",
        "gopher://hooks.example.com/",
    ]
    .map(String::from)
    .to_vec();
    // A DNS name resolving to loopback: this machine's own name, where it does.
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    let host = host.trim();
    if let Ok(mut addrs) = tokio::net::lookup_host((host, 443)).await {
        if addrs.any(|a| a.ip().is_loopback()) {
            hostile.push(format!("https://{host}/"));
        }
    }
    assert!(hostile.len() >= 20);
    for url in &hostile {
        let (status, body) = register(&app, &app.tenant_token("a"), url).await;
        assert_eq!(status, 422, "{url}: {body}");
        assert_eq!(body["error"]["errors"][0]["field"], "url", "{url}: {body}");
    }
}

#[tokio::test]
async fn redirects_are_not_followed() {
    // Loopback allowed (the test's receivers), and a receiver that redirects to another.
    let app = TestApp::start().await;
    scenario::push_inventory(&app, &scenario::batches()).await;
    let hits = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let target = {
        let hits = hits.clone();
        let router = axum::Router::new().fallback(move || {
            hits.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            async { axum::http::StatusCode::NO_CONTENT }
        });
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(l, router).await.unwrap() });
        addr
    };
    let redirector = {
        let router = axum::Router::new().fallback(move || async move {
            (
                axum::http::StatusCode::TEMPORARY_REDIRECT,
                [("location", format!("http://{target}/"))],
            )
        });
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(l, router).await.unwrap() });
        addr
    };
    let (status, created) = register(
        &app,
        &app.tenant_token("a"),
        &format!("http://{redirector}/"),
    )
    .await;
    assert_eq!(status, 201, "{created}");
    let endpoint = created["endpoint"]["id"].as_str().unwrap();
    let (status, _) = app
        .post_raw(
            &app.tenant_token("a"),
            &format!("/v1/webhooks/endpoints/{endpoint}/test"),
            String::new(),
        )
        .await;
    assert_eq!(status, 202);
    let mut history = Value::Null;
    for _ in 0..100 {
        let (_, m) = app
            .get(
                Some(&app.tenant_token("a")),
                &format!("/v1/webhooks/endpoints/{endpoint}/messages"),
            )
            .await;
        if m[0]["attempts"] == 1 {
            history = m[0].clone();
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(history["history"][0]["status"], 307, "{history}");
    assert_eq!(
        history["state"], "pending",
        "a redirect is a failure, retried later"
    );
    assert_eq!(
        hits.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "the redirect was not followed"
    );
}

/// An https receiver with a certificate from a private CA (the operator's
/// WATTLEDGER_WEBHOOK_CA_FILE): delivered over TLS to the name, plain http refused.
#[tokio::test]
async fn deliveries_go_over_https_to_a_receiver_of_a_private_ca() {
    let dir = std::env::temp_dir().join(format!("wl-webhooks-tls-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let openssl = |args: &[&str]| {
        let out = Command::new("openssl")
            .args(args)
            .current_dir(&dir)
            .output()
            .expect("openssl (Debian: openssl, a dependency of ca-certificates)");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    std::fs::write(
        dir.join("leaf.ext"),
        "subjectAltName=DNS:localhost\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n",
    )
    .unwrap();
    openssl(&[
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
        "-days",
        "2",
        "-subj",
        "/CN=wattledger test CA",
    ]);
    openssl(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "leaf.key",
        "-out",
        "leaf.csr",
        "-subj",
        "/CN=localhost",
    ]);
    openssl(&[
        "x509",
        "-req",
        "-in",
        "leaf.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "leaf.pem",
        "-days",
        "2",
        "-extfile",
        "leaf.ext",
    ]);

    let port = free_port();
    let log = dir.join("requests.jsonl");
    let server = r#"
import http.server, json, ssl, sys
port, cert, key, log = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
class H(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        self.rfile.read(int(self.headers.get("content-length", "0")))
        with open(log, "a") as f:
            f.write(json.dumps({k: self.headers.get(k) for k in
                ("webhook-id", "webhook-signature", "host")}) + "\n")
        self.send_response(204)
        self.end_headers()
    def log_message(self, *a):
        pass
srv = http.server.HTTPServer(("127.0.0.1", port), H)
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(cert, key)
srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
srv.serve_forever()
"#;
    let _receiver = Killed::spawn(
        Command::new("python3")
            .args(["-c", server, &port.to_string()])
            .arg(dir.join("leaf.pem"))
            .arg(dir.join("leaf.key"))
            .arg(&log),
    );
    listening(port).await;

    let ca = dir.join("ca.pem");
    let app = TestApp::start_with(|c| {
        c.webhook_allow = wattledger_domain::webhooks::Reach {
            loopback: true,
            private: false,
            http: false,
        };
        c.webhook_ca_file = Some(ca);
    })
    .await;
    scenario::push_inventory(&app, &scenario::batches()).await;
    let token = app.tenant_token("a");
    let (status, refused) = register(&app, &token, &format!("http://localhost:{port}/")).await;
    assert_eq!(
        status, 422,
        "plain http is refused unless allowed: {refused}"
    );
    let (status, created) =
        register(&app, &token, &format!("https://localhost:{port}/hooks")).await;
    assert_eq!(status, 201, "{created}");
    let endpoint = created["endpoint"]["id"].as_str().unwrap();
    let (_, queued) = app
        .post_raw(
            &token,
            &format!("/v1/webhooks/endpoints/{endpoint}/test"),
            String::new(),
        )
        .await;
    let id = queued["message_id"].as_str().unwrap().to_owned();
    let mut messages = Value::Null;
    for _ in 0..100 {
        messages = app
            .get(
                Some(&token),
                &format!("/v1/webhooks/endpoints/{endpoint}/messages"),
            )
            .await
            .1;
        if messages[0]["state"] != "pending" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(messages[0]["state"], "delivered", "{messages}");
    let seen = std::fs::read_to_string(&log).unwrap();
    let line: Value = serde_json::from_str(seen.lines().next().unwrap()).unwrap();
    assert_eq!(line["webhook-id"], id.as_str());
    assert!(line["webhook-signature"]
        .as_str()
        .unwrap()
        .starts_with("v1,"));
    assert_eq!(line["host"], format!("localhost:{port}"));
}
