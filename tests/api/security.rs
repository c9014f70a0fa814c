//! What a probe of the running server as an attacker found, each kept as the request and
//! the answer it must get (issue 16, section 3, items 1 to 17): hostile text, dates and
//! decimals, sessions, password guessing, token times, the admission writer, existence
//! oracles, SSRF, slow clients, Kubernetes limits, headers, duplicate keys, spreadsheet
//! formulas in exports, `/health` with the database stalled, and tenant scoping.

use crate::admission::{ask, setup};
use crate::dashboard::{app_with_users, hidden, Browser};
use crate::scenario;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{json, Value};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use wattledger::auth::{Role, AUDIENCE, ISSUER};
use wattledger_tests::{fresh_db, TestApp, SECRET};

/// The `(index, field)` of each error in a refused body.
fn fields(body: &Value) -> Vec<(u64, String)> {
    body["error"]["errors"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|e| {
                    (
                        e["index"].as_u64().unwrap(),
                        e["field"].as_str().unwrap().to_owned(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Polls until the decision `id` is stored.
async fn stored(app: &TestApp, id: &str) -> bool {
    for _ in 0..100 {
        let n: i64 =
            sqlx::query_scalar("SELECT count(*) FROM admission_decisions WHERE id = $1::uuid")
                .bind(id)
                .fetch_one(&app.pool)
                .await
                .unwrap();
        if n == 1 {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

/// Item 1: a NUL in a scheduler's text is refused (422) rather than answered and never
/// stored, through the API and through a pod's annotation; the next decision is stored.
#[tokio::test]
async fn a_nul_in_an_admission_question_is_refused_and_the_next_decision_is_stored() {
    let app = setup().await;
    let (status, body) = ask(
        &app,
        json!({"tenant": "a", "gpus": 1, "duration_s": 60, "job_name": "train\u{0}x"}),
    )
    .await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(fields(&body), vec![(0, "job_name".to_owned())]);

    let review = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {"uid": "u-1", "kind": {"kind": "Pod"}, "operation": "CREATE",
            "namespace": "serving", "name": "p", "object": {
                "metadata": {"annotations": {"wattledger.io/tenant": "a",
                                             "wattledger.io/model": "llama\u{0}"}},
                "spec": {"containers": [{"resources": {"limits": {"nvidia.com/gpu": 1}}}]}}}});
    let (status, body) = app
        .post_raw(
            &app.token(Role::Scheduler),
            "/v1/admission/kubernetes",
            review.to_string(),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["response"]["allowed"], false);
    assert_eq!(body["response"]["status"]["code"], 422);
    assert!(body["response"]["status"]["message"]
        .as_str()
        .unwrap()
        .contains("model must not contain a NUL byte"));

    let (status, body) = ask(
        &app,
        json!({"tenant": "a", "gpus": 1, "duration_s": 60, "job_name": "next"}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert!(stored(&app, body["decision_id"].as_str().unwrap()).await);
}

/// Item 1, the writer: a row the database refuses is kept as a dead letter with its
/// reason and counted; the rows around it are stored; nothing waits behind it.
#[tokio::test]
async fn the_decision_writer_dead_letters_a_row_the_database_refuses() {
    use wattledger::admission::writer::{write_batch, WriterStats};
    use wattledger_store::admission::NewDecision;
    let app = TestApp::start().await;
    scenario::push_inventory(&app, &scenario::batches()).await;
    let tenant: i64 = sqlx::query_scalar("SELECT id FROM tenants WHERE key = 'a'")
        .fetch_one(&app.pool)
        .await
        .unwrap();
    let row = |name: &str| NewDecision {
        id: uuid::Uuid::now_v7(),
        decided_at: chrono::Utc::now(),
        tenant_id: tenant,
        source: "api".into(),
        job_name: name.into(),
        job_key: None,
        kind: wattledger_domain::job_kind::JobKind::Batch,
        priority: wattledger_domain::priority::Priority::normal(),
        gpus: 1,
        decision: wattledger_domain::admission::Verdict::Reject,
        site_id: None,
        start_at: None,
        end_at: None,
        reserved_w: None,
        model: None,
        est_kwh: None,
        est_cost: None,
        est_currency: None,
        est_carbon_kg: None,
        grid_event_id: None,
        moved_mj: None,
        request: json!({"job_name": name}).to_string(),
        answer: "{}".into(),
        idempotency_key: None,
    };
    let batch = vec![row("first"), row("bad\u{0}row"), row("third")];
    let stats = WriterStats::default();
    tokio::time::timeout(
        Duration::from_secs(10),
        write_batch(&app.pool, &batch, &stats),
    )
    .await
    .expect("the writer must not retry a refused row forever");
    assert_eq!(stats.stored.load(Ordering::Relaxed), 2);
    assert_eq!(stats.dead_lettered.load(Ordering::Relaxed), 1);
    let names: Vec<String> =
        sqlx::query_scalar("SELECT job_name FROM admission_decisions ORDER BY job_name")
            .fetch_all(&app.pool)
            .await
            .unwrap();
    assert_eq!(names, ["first", "third"]);
    let (id, record, error): (uuid::Uuid, String, String) =
        sqlx::query_as("SELECT decision_id, record, error FROM admission_dead_letters")
            .fetch_one(&app.pool)
            .await
            .unwrap();
    assert_eq!(id, batch[1].id);
    assert!(record.contains("bad\\u0000row"), "{record}");
    assert!(!error.is_empty());
}

/// Item 2: NUL bytes in a path, a JSON body and a form are a 4xx, never a 500.
#[tokio::test]
async fn nul_bytes_anywhere_are_refused_with_a_4xx() {
    let app = app_with_users().await;
    let admin = app.token(Role::Admin);
    let (status, body) = app.get(Some(&admin), "/v1/budgets/a%00b").await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (400, Some("bad_request"))
    );
    let (status, body) = app
        .post_raw(
            &admin,
            "/v1/webhooks/endpoints",
            json!({"tenant": "a", "url": "https://hooks.example.com/x", "description": "a\u{0}b"})
                .to_string(),
        )
        .await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(fields(&body), vec![(0, "description".to_owned())]);
    let (status, body) = app
        .ingest(
            &app.token(Role::Scheduler),
            "jobs",
            json!([{"key": "j1", "tenant": "a", "site": "s1", "kind": "batch", "start_at": scenario::at(0)},
                   {"key": "j2", "tenant": "a\u{0}", "kind": "batch", "start_at": scenario::at(0)}]),
        )
        .await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(fields(&body), vec![(1, "tenant".to_owned())]);
    // The sign-in form: a friendly 400, and nothing was looked up.
    let browser = Browser::new(&app);
    let form = browser.get("/login").await;
    let csrf = hidden(&form.body, "csrf");
    let login = form.cookies[0].split(';').next().unwrap().to_owned();
    let page = browser
        .post(
            "/login",
            &[
                ("username", "ali\u{0}ce"),
                ("password", "x"),
                ("csrf", &csrf),
            ],
            Some(&login),
        )
        .await;
    assert_eq!(page.status, 400, "{}", page.body);
    assert!(page.body.contains("NUL"), "{}", page.body);
}

/// Item 3: times outside 2000..2100 are a 422 that says so, everywhere a time is taken.
#[tokio::test]
async fn dates_outside_the_bounds_are_refused_not_a_500_or_a_panic() {
    let app = setup().await;
    let finance = app.token(Role::Finance);
    for path in [
        "/v1/usage?from=-5000-01-01T00:00:00Z",
        "/v1/usage?to=-262143-01-01T00:00:00Z",
        "/v1/usage?to=%2B262142-12-31T23:59:59Z",
        "/v1/jobs?from=-5000-01-01T00:00:00Z",
        "/v1/admission/decisions?from=-5000-01-01T00:00:00Z",
        "/v1/metrics/efficiency?to=2100-01-01T00:00:00Z",
    ] {
        let (status, body) = app.get(Some(&finance), path).await;
        assert_eq!(status, 422, "{path}: {body}");
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap()
                .contains("between 2000-01-01 and 2100-01-01"),
            "{path}: {body}"
        );
    }
    // This one panicked chrono (and, before, poisoned admission's lock: item 8).
    for (field, value) in [
        ("earliest_start", "+262142-12-31T23:59:59Z"),
        ("deadline", "1999-12-31T23:59:59Z"),
    ] {
        let mut q = json!({"tenant": "a", "gpus": 1, "duration_s": 60});
        q[field] = json!(value);
        let (status, body) = ask(&app, q).await;
        assert_eq!(status, 422, "{field}: {body}");
        assert_eq!(fields(&body), vec![(0, field.to_owned())]);
    }
    // Item 8: admission keeps answering, and stores what it answers.
    let (status, body) = ask(&app, json!({"tenant": "a", "gpus": 1, "duration_s": 60})).await;
    assert_eq!(status, 200, "{body}");
    assert!(stored(&app, body["decision_id"].as_str().unwrap()).await);
    let (status, body) = app
        .post_raw(
            &app.token(Role::Collector),
            "/v1/ingest/samples",
            json!({"records": [{"meter": "g0", "ts": "+262142-12-31T23:59:59Z", "counter_mj": 1}]})
                .to_string(),
        )
        .await;
    assert_eq!((status, fields(&body)), (422, vec![(0, "ts".to_owned())]));
}

/// Item 3, the dashboard: a range with the largest dates is a friendly 400.
#[tokio::test]
async fn the_dashboards_range_refuses_dates_past_the_bounds() {
    let app = app_with_users().await;
    let mut ada = Browser::new(&app);
    ada.sign_in("ada", "correct horse battery").await;
    for q in [
        "from=262143-12-31",
        "from=2026-11-01&to=%2B262143-12-31",
        "from=1900-01-01&to=1900-01-02",
    ] {
        let page = ada.get(&format!("/tenants/a?{q}")).await;
        assert_eq!(page.status, 400, "{q}: {}", page.body);
        let page = ada.get(&format!("/operator?{q}")).await;
        assert_eq!(page.status, 400, "{q}: {}", page.body);
    }
}

/// Items 4 and 14: a limit finer than its column, and a field sent twice, are 422s naming
/// the field.
#[tokio::test]
async fn decimals_finer_than_a_column_and_duplicate_keys_are_refused() {
    let app = app_with_users().await;
    let finance = app.token(Role::Finance);
    for (field, value, why) in [
        ("limit_cost", "1e-28", "at most 6 decimal places"),
        ("limit_kwh", "0.0000001", "at most 6 decimal places"),
        ("limit_kwh", "0", "must be between"),
    ] {
        let mut b = json!({"tenant": "a"});
        b[field] = json!(value);
        if field == "limit_cost" {
            b["currency"] = json!("EUR");
        }
        let (status, body) = app.put(&finance, "/v1/budgets/tiny", b).await;
        assert_eq!(status, 422, "{field}={value}: {body}");
        assert_eq!(fields(&body), vec![(0, field.to_owned())]);
        assert!(body.to_string().contains(why), "{body}");
    }
    // Sent as raw text: serde_json would keep the last of two keys silently.
    let raw = |body: &str| {
        let app = &app;
        let body = body.to_owned();
        async move {
            app.send(
                reqwest::Method::PUT,
                &app.token(Role::Finance),
                "/v1/budgets/twice",
                body,
            )
            .await
        }
    };
    let (status, body) = raw(r#"{"tenant": "a", "limit_kwh": "10", "limit_kwh": "1000000"}"#).await;
    assert_eq!(
        (status, fields(&body)),
        (422, vec![(0, "limit_kwh".to_owned())])
    );
    let collector = app.token(Role::Collector);
    let (status, body) = app
        .post_raw(
            &collector,
            "/v1/ingest/samples",
            format!(
                r#"{{"records": [{{"meter": "g0", "ts": "{}", "counter_mj": 1, "counter_mj": 2}}]}}"#,
                scenario::at(0)
            ),
        )
        .await;
    assert_eq!(
        (status, fields(&body)),
        (422, vec![(0, "counter_mj".to_owned())])
    );
    let (status, body) = app
        .post_raw(
            &collector,
            "/v1/ingest/samples",
            r#"{"records": [], "records": [{"meter": "g0"}]}"#.into(),
        )
        .await;
    assert_eq!(
        (status, fields(&body)),
        (422, vec![(0, "records".to_owned())])
    );
    let (status, body) = ask(
        &app,
        serde_json::from_str::<Value>(r#"{"tenant": "a", "gpus": 1, "duration_s": 60}"#).unwrap(),
    )
    .await;
    assert_ne!(status, 500, "{body}");
    let (status, body) = app
        .post_raw(
            &app.token(Role::Scheduler),
            "/v1/admission",
            r#"{"tenant": "a", "gpus": 1, "gpus": 64, "duration_s": 60}"#.into(),
        )
        .await;
    assert_eq!((status, fields(&body)), (422, vec![(0, "gpus".to_owned())]));
}

/// Item 5: sign-out, a password reset and a new role each end the sessions they should.
#[tokio::test]
async fn sessions_end_at_sign_out_password_reset_and_role_change() {
    let app = app_with_users().await;
    let mut alice = Browser::new(&app);
    alice.sign_in("alice", "correct horse battery").await;
    let copied = alice.session.clone().unwrap();
    let page = alice.get("/tenants/a").await;
    assert_eq!(page.status, 200);
    let csrf = hidden(&page.body, "csrf");
    alice.post("/logout", &[("csrf", &csrf)], None).await;
    let mut thief = Browser::new(&app);
    thief.session = Some(copied);
    assert_eq!(
        thief.get("/tenants/a").await.location.as_deref(),
        Some("/login")
    );

    // An admin resets alice's password: her open session ends.
    alice.sign_in("alice", "correct horse battery").await;
    assert_eq!(alice.get("/tenants/a").await.status, 200);
    let mut ada = Browser::new(&app);
    ada.sign_in("ada", "correct horse battery").await;
    let users = ada.get("/admin/users").await;
    let csrf = hidden(&users.body, "csrf");
    let page = set_alice(&ada, &csrf, "a").await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert_eq!(
        alice.get("/tenants/a").await.location.as_deref(),
        Some("/login")
    );
    assert_eq!(
        alice.sign_in("alice", "correct horse battery").await.status,
        401
    );
    alice.sign_in("alice", "a brand new password").await;
    assert_eq!(alice.get("/tenants/a").await.status, 200);

    // Alice moves to tenant b: the session that saw a's pages ends.
    let page = set_alice(&ada, &csrf, "b").await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert_eq!(
        alice.get("/tenants/a").await.location.as_deref(),
        Some("/login")
    );
    // The admin's own session was not touched.
    assert_eq!(ada.get("/admin/users").await.status, 200);

    // A role-only change: fin, finance, becomes an operator with the same password and no
    // tenant either way; the session that held finance's rights ends.
    let mut fin = Browser::new(&app);
    fin.sign_in("fin", "correct horse battery").await;
    assert_eq!(fin.get("/finance").await.status, 200);
    let page = ada
        .post(
            "/admin/users",
            &[
                ("csrf", &csrf),
                ("username", "fin"),
                ("role", "operator"),
                ("tenant", ""),
                ("password", "correct horse battery"),
            ],
            None,
        )
        .await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert_eq!(
        fin.get("/finance").await.location.as_deref(),
        Some("/login")
    );
    // The same password signs in again, now with the new role only.
    assert_eq!(
        fin.sign_in("fin", "correct horse battery").await.status,
        303
    );
    assert_eq!(fin.get("/operator").await.status, 200);
    assert_ne!(fin.get("/finance").await.status, 200);
}

/// Item 6: guessing passwords meets growing delays, the same for a name that exists and one
/// that does not; while blocked even the right password is refused.
#[tokio::test]
async fn password_guessing_is_slowed_alike_for_known_and_unknown_names() {
    let app = app_with_users().await;
    async fn guesses(app: &TestApp, name: &str) -> Vec<u16> {
        let mut b = Browser::new(app);
        let mut out = Vec::new();
        for _ in 0..10 {
            out.push(b.sign_in(name, "wrong horse battery").await.status);
        }
        out
    }
    let known = guesses(&app, "alice").await;
    // Blocked: the right password is not even looked at.
    let mut browser = Browser::new(&app);
    let page = browser.sign_in("alice", "correct horse battery").await;
    assert_eq!(page.status, 429, "{}", page.body);
    assert!(page.headers.contains_key("retry-after"));
    assert!(
        page.body.contains("Too many failed sign-ins"),
        "{}",
        page.body
    );
    let unknown = guesses(&app, "mallory").await;
    // Five free failures, the sixth sets a one-second block, the next is refused unread:
    // the same for a name that exists and one that does not.
    for statuses in [&known, &unknown] {
        assert_eq!(&statuses[..6], &[401; 6], "{statuses:?}");
        assert_eq!(statuses[6], 429, "{statuses:?}");
        assert!(
            statuses.iter().all(|s| [401, 429].contains(s)),
            "{statuses:?}"
        );
    }
    // Another name is not blocked by alice's (the address counts them all, and allows more).
    let page = browser.sign_in("bob", "correct horse battery").await;
    assert_eq!(page.status, 303, "{}", page.body);
}

/// Item 6 behind a reverse proxy: the per-address count follows the client the operator's
/// proxy names, not the proxy itself, and only for a proxy the operator trusts.
#[tokio::test]
async fn behind_a_trusted_proxy_the_address_throttle_counts_each_client() {
    use wattledger::config::TrustedProxies;
    let app =
        TestApp::start_with(|c| c.trusted_proxies = TrustedProxies::parse("127.0.0.1").unwrap())
            .await;
    scenario::push_inventory(&app, &scenario::batches()).await;
    wattledger::dashboard::login::add_user(
        &app.pool,
        "ada",
        Role::Admin,
        None,
        "correct horse battery",
    )
    .await
    .unwrap();
    // 21 failures from one client, under 21 names (no name reaches its own limit).
    let mut mallory = Browser::new(&app);
    mallory.forwarded_for = Some("203.0.113.66".into());
    let mut last = 0;
    for k in 0..21 {
        last = mallory
            .sign_in(&format!("guess{k}"), "nope nope nope")
            .await
            .status;
    }
    assert_eq!(last, 401);
    assert_eq!(
        mallory.sign_in("guess99", "nope nope nope").await.status,
        429
    );
    // Another client through the same proxy signs in.
    let mut ada = Browser::new(&app);
    ada.forwarded_for = Some("198.51.100.20".into());
    assert_eq!(
        ada.sign_in("ada", "correct horse battery").await.status,
        303
    );
    // Without the proxy setting, the header is the client's own word and is not believed.
    let app = TestApp::start().await;
    wattledger::dashboard::login::add_user(
        &app.pool,
        "ada",
        Role::Admin,
        None,
        "correct horse battery",
    )
    .await
    .unwrap();
    let mut mallory = Browser::new(&app);
    for k in 0..21 {
        mallory.forwarded_for = Some(format!("203.0.113.{k}"));
        mallory
            .sign_in(&format!("guess{k}"), "nope nope nope")
            .await;
    }
    let mut ada = Browser::new(&app);
    ada.forwarded_for = Some("198.51.100.20".into());
    assert_eq!(
        ada.sign_in("ada", "correct horse battery").await.status,
        429
    );
}

/// The admin saves user alice: tenant `tenant`, a new password.
async fn set_alice(admin: &Browser, csrf: &str, tenant: &str) -> crate::dashboard::Page {
    admin
        .post(
            "/admin/users",
            &[
                ("csrf", csrf),
                ("username", "alice"),
                ("role", "tenant"),
                ("tenant", tenant),
                ("password", "a brand new password"),
            ],
            None,
        )
        .await
}

fn forged(claims: Value) -> String {
    jsonwebtoken::encode(
        &Header::new(Algorithm::HS256),
        &claims,
        &EncodingKey::from_secret(SECRET.as_bytes()),
    )
    .unwrap()
}

/// Item 7: `nbf` in the future, and `iat` in the future, are refused.
#[tokio::test]
async fn tokens_not_yet_valid_are_refused() {
    let app = TestApp::start().await;
    let now = chrono::Utc::now().timestamp();
    let base = json!({"sub": "x", "role": "admin", "iss": ISSUER, "aud": AUDIENCE,
                      "iat": now, "exp": now + 7200, "jti": uuid::Uuid::now_v7().to_string()});
    let mut nbf = base.clone();
    nbf["nbf"] = json!(now + 3600);
    let mut iat = base.clone();
    iat["iat"] = json!(now + 3600);
    for (what, claims) in [("nbf", nbf), ("iat", iat)] {
        let (status, body) = app.get(Some(&forged(claims)), "/v1/usage").await;
        assert_eq!(status, 401, "{what}: {body}");
    }
    let (status, _) = app.get(Some(&forged(base)), "/v1/usage").await;
    assert_eq!(status, 200);
}

/// Item 9: another tenant's job and a job that does not exist answer the same.
#[tokio::test]
async fn another_tenants_job_reads_as_one_that_does_not_exist() {
    let app = TestApp::start().await;
    scenario::push(&app, &scenario::batches()).await;
    app.attribute().await;
    let b = app.tenant_token("b");
    let theirs = app.get(Some(&b), "/v1/usage?job=job-train").await;
    let missing = app.get(Some(&b), "/v1/usage?job=no-such-job").await;
    assert_eq!(theirs.0, 404);
    assert_eq!(theirs, missing);
    // Their own job, and the shared endpoint they used, are theirs to see.
    for job in ["job-mig", "job-endpoint"] {
        let (status, body) = app.get(Some(&b), &format!("/v1/usage?job={job}")).await;
        assert_eq!(status, 200, "{job}: {body}");
    }
}

/// Item 10: the addresses the probe registered are refused like the rest.
#[tokio::test]
async fn webhook_destinations_inside_someones_network_are_refused() {
    let app = TestApp::start_with(|c| c.webhook_allow = Default::default()).await;
    scenario::push_inventory(&app, &scenario::batches()).await;
    for url in [
        "https://168.63.129.16/",
        "https://[2001:0:4136:e378:8000:63bf:80ff:fffe]/",
        "https://[64:ff9b:1::7f00:1]/",
        "https://[::ffff:0:127.0.0.1]/",
        "https://[fec0::1]/",
    ] {
        let (status, body) = app
            .post_raw(
                &app.tenant_token("a"),
                "/v1/webhooks/endpoints",
                json!({"url": url}).to_string(),
            )
            .await;
        assert_eq!(status, 422, "{url}: {body}");
        assert_eq!(fields(&body), vec![(0, "url".to_owned())], "{url}");
    }
}

/// Item 11: a declared body over the limit is refused at once; headers that never finish
/// do not hold a connection for ever.
#[tokio::test]
async fn slow_and_lying_clients_are_answered_or_cut_off() {
    let app = TestApp::start_with(|c| c.max_body_bytes = 1024).await;
    let addr = app.base.trim_start_matches("http://").to_owned();
    let mut s = TcpStream::connect(&addr).await.unwrap();
    let t0 = Instant::now();
    s.write_all(
        format!(
            "POST /v1/ingest/samples HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {}\r\n\
             Content-Type: application/json\r\nContent-Length: 104857600\r\n\r\n",
            app.token(Role::Collector)
        )
        .as_bytes(),
    )
    .await
    .unwrap();
    let mut head = [0u8; 12];
    tokio::time::timeout(Duration::from_secs(3), s.read_exact(&mut head))
        .await
        .expect("answered without waiting for the body")
        .unwrap();
    assert_eq!(&head, b"HTTP/1.1 413");
    assert!(t0.elapsed() < Duration::from_secs(3));

    let mut s = TcpStream::connect(&addr).await.unwrap();
    s.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        .await
        .unwrap();
    let t0 = Instant::now();
    let mut buf = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(20), s.read_to_end(&mut buf)).await;
    assert!(
        read.is_ok(),
        "a connection with unfinished headers was held open"
    );
    let waited = t0.elapsed();
    assert!(
        waited >= Duration::from_secs(5) && waited < Duration::from_secs(15),
        "{waited:?}"
    );
}

/// The status line of a POST declaring a 100 MB body, with the header `auth` (a whole
/// line, or nothing), answered before any of the body is sent.
async fn oversized_post(addr: String, auth: String) -> String {
    let mut s = TcpStream::connect(&addr).await.unwrap();
    s.write_all(
        format!(
            "POST /v1/ingest/samples HTTP/1.1\r\nHost: x\r\n{auth}\
             Content-Type: application/json\r\nContent-Length: 104857600\r\n\r\n"
        )
        .as_bytes(),
    )
    .await
    .unwrap();
    let mut head = [0u8; 12];
    tokio::time::timeout(Duration::from_secs(10), s.read_exact(&mut head))
        .await
        .expect("answered without waiting for the body")
        .unwrap();
    String::from_utf8_lossy(&head).into_owned()
}

/// A body declared over the limit without a valid token is a 401, not a 413: who may not
/// send anything hears that first; with a valid token it is the 413.
#[tokio::test]
async fn an_oversized_body_without_a_valid_token_is_refused_as_unauthenticated() {
    let app = TestApp::start_with(|c| c.max_body_bytes = 1024).await;
    let addr = app.base.trim_start_matches("http://").to_owned();
    let head = |auth: String| oversized_post(addr.clone(), auth);
    assert_eq!(head(String::new()).await, "HTTP/1.1 401");
    assert_eq!(
        head("Authorization: Bearer not.a.token\r\n".into()).await,
        "HTTP/1.1 401"
    );
    let mut nul = serde_json::json!({"sub": "x", "role": "collector", "iss": ISSUER,
        "aud": AUDIENCE, "iat": chrono::Utc::now().timestamp(),
        "exp": chrono::Utc::now().timestamp() + 600, "jti": uuid::Uuid::now_v7().to_string()});
    nul["sub"] = "a\0b".into();
    assert_eq!(
        head(format!("Authorization: Bearer {}\r\n", forged(nul))).await,
        "HTTP/1.1 401"
    );
    assert_eq!(
        head(format!(
            "Authorization: Bearer {}\r\n",
            app.token(Role::Collector)
        ))
        .await,
        "HTTP/1.1 413"
    );
    // Through an ordinary client too.
    let (status, body) = app
        .post_raw("not.a.token", "/v1/ingest/samples", "x".repeat(4096))
        .await;
    assert_eq!(status, 401, "{body}");
}

/// Item 12: GPU limits a pod's author chose to be negative, cancelling or overflowing are
/// denied with the reason.
#[tokio::test]
async fn hostile_pod_gpu_limits_are_denied() {
    let app = setup().await;
    let pod = |limits: Vec<Value>| {
        let containers: Vec<Value> = limits
            .into_iter()
            .map(|l| json!({"resources": {"limits": {"nvidia.com/gpu": l}}}))
            .collect();
        json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": "u", "kind": {"kind": "Pod"}, "operation": "CREATE",
                "namespace": "a", "name": "p",
                "object": {"metadata": {"annotations": {"wattledger.io/tenant": "a"}},
                           "spec": {"containers": containers}}}})
    };
    for (limits, why) in [
        (vec![json!(-4)], "-4 is not between 0 and 100000"),
        (vec![json!(8), json!(-8)], "-8 is not between 0 and 100000"),
        (
            vec![json!(i64::MAX), json!(i64::MAX)],
            "is not between 0 and 100000",
        ),
        (
            vec![json!(60_000), json!(60_000)],
            "add up to more than 100000",
        ),
    ] {
        let (status, body) = app
            .post_raw(
                &app.token(Role::Scheduler),
                "/v1/admission/kubernetes",
                pod(limits.clone()).to_string(),
            )
            .await;
        assert_eq!(status, 200, "{body}");
        let r = &body["response"];
        assert_eq!(
            (r["allowed"].as_bool(), r["status"]["code"].as_i64()),
            (Some(false), Some(400)),
            "{limits:?}: {body}"
        );
        assert!(
            r["status"]["message"].as_str().unwrap().contains(why),
            "{limits:?}: {body}"
        );
    }
}

/// Item 13: every answer says nosniff; answers with data (JSON, errors, CSV, pages) are not
/// stored by caches and carry a content security policy.
#[tokio::test]
async fn every_answer_carries_the_headers_that_apply() {
    let app = app_with_users().await;
    let finance = app.token(Role::Finance);
    let get = |path: &'static str, token: Option<String>| {
        let app = &app;
        async move {
            let mut r = app.http.get(format!("{}{path}", app.base));
            if let Some(t) = token {
                r = r.bearer_auth(t);
            }
            r.send().await.unwrap()
        }
    };
    let mut answers = vec![
        (
            "tenant data",
            get("/v1/usage?group_by=tenant", Some(finance.clone())).await,
        ),
        (
            "an API error",
            get("/v1/budgets/none", Some(finance.clone())).await,
        ),
        (
            "an unknown API path",
            get("/v1/nothing", Some(finance.clone())).await,
        ),
        ("the login page", get("/login", None).await),
        ("the 404 page", get("/no/such/page", None).await),
        ("unauthenticated", get("/v1/usage", None).await),
    ];
    let mut alice = Browser::new(&app);
    alice.sign_in("alice", "correct horse battery").await;
    for (what, r) in answers.drain(..) {
        let h = r.headers();
        assert_eq!(h["x-content-type-options"], "nosniff", "{what}");
        assert_eq!(h["cache-control"], "no-store", "{what}");
        assert!(h.contains_key("content-security-policy"), "{what}");
        assert_eq!(h["x-frame-options"], "DENY", "{what}");
    }
    let page = Browser::new(&app).get("/no/such/page").await;
    assert_eq!(page.status, 404);
    assert!(
        page.body.contains("<html"),
        "a browser gets the page, not JSON"
    );
    let page = alice.get("/tenants/a").await;
    assert!(page.headers["content-security-policy"]
        .to_str()
        .unwrap()
        .contains("style-src 'self'"));
    // Static files may be cached; they still say nosniff.
    let css = get("/static/app.css", None).await;
    assert_eq!(css.headers()["x-content-type-options"], "nosniff");
    assert!(css.headers()["cache-control"]
        .to_str()
        .unwrap()
        .starts_with("public"));
}

/// A TCP proxy in front of PostgreSQL that can stall: bytes stop flowing both ways, as when
/// the database host hangs.
struct Proxy {
    port: u16,
    stalled: Arc<AtomicBool>,
}

impl Proxy {
    async fn start(upstream: String) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let stalled = Arc::new(AtomicBool::new(false));
        let flag = stalled.clone();
        tokio::spawn(async move {
            loop {
                let Ok((client, _)) = listener.accept().await else {
                    return;
                };
                let flag = flag.clone();
                let upstream = upstream.clone();
                tokio::spawn(async move {
                    while flag.load(Ordering::Relaxed) {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                    let Ok(server) = TcpStream::connect(&upstream).await else {
                        return;
                    };
                    let (cr, cw) = client.into_split();
                    let (sr, sw) = server.into_split();
                    tokio::spawn(pump(cr, sw, flag.clone()));
                    tokio::spawn(pump(sr, cw, flag));
                });
            }
        });
        Proxy { port, stalled }
    }
}

async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    stalled: Arc<AtomicBool>,
) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let Ok(n) = from.read(&mut buf).await else {
            return;
        };
        if n == 0 {
            return;
        }
        while stalled.load(Ordering::Relaxed) {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

/// Item 16: with the database hung, `/health` answers within a second: 503 and why.
#[tokio::test]
async fn health_answers_within_a_second_while_the_database_hangs() {
    let (_direct, url) = fresh_db().await;
    let rest = url.split_once('@').unwrap().1;
    let (hostport, db) = rest.split_once('/').unwrap();
    let proxy = Proxy::start(hostport.to_owned()).await;
    let proxied = url.replace(hostport, &format!("127.0.0.1:{}", proxy.port));
    let pool = wattledger_store::connect(&proxied, 5).await.unwrap();
    let app = TestApp::start_on(pool, proxied.clone()).await;
    let (status, body) = app.get(None, "/health").await;
    assert_eq!(
        (status, body["status"].as_str()),
        (200, Some("ok")),
        "{body}"
    );
    assert!(!db.is_empty());

    proxy.stalled.store(true, Ordering::Relaxed);
    for _ in 0..2 {
        let t0 = Instant::now();
        let (status, body) = app.get(None, "/health").await;
        assert!(
            t0.elapsed() < Duration::from_millis(1800),
            "{:?}",
            t0.elapsed()
        );
        assert_eq!(status, 503, "{body}");
        assert_eq!(body["status"], "unavailable");
        assert!(
            body["reasons"][0]
                .as_str()
                .unwrap()
                .contains("did not answer"),
            "{body}"
        );
    }
    proxy.stalled.store(false, Ordering::Relaxed);
    for _ in 0..100 {
        if app.get(None, "/health").await.0 == 200 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("/health did not recover with the database");
}

/// Item 17 (the API side of Scope on every store function): another tenant's webhook
/// endpoint cannot be changed, rotated, deleted or read through, and answers as a missing
/// one does.
#[tokio::test]
async fn another_tenants_endpoint_is_not_found_for_every_verb() {
    let app = TestApp::start().await;
    scenario::push_inventory(&app, &scenario::batches()).await;
    let (status, body) = app
        .post_raw(
            &app.tenant_token("a"),
            "/v1/webhooks/endpoints",
            json!({"url": "http://127.0.0.1:9/hook"}).to_string(),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    let id = body["endpoint"]["id"].as_str().unwrap().to_owned();
    let missing = uuid::Uuid::now_v7().to_string();
    let b = app.tenant_token("b");
    for target in [&id, &missing] {
        let base = format!("/v1/webhooks/endpoints/{target}");
        for (method, path, body) in [
            (reqwest::Method::GET, base.clone(), String::new()),
            (
                reqwest::Method::PATCH,
                base.clone(),
                json!({"enabled": false}).to_string(),
            ),
            (reqwest::Method::POST, format!("{base}/rotate"), "{}".into()),
            (reqwest::Method::POST, format!("{base}/test"), String::new()),
            (
                reqwest::Method::GET,
                format!("{base}/messages"),
                String::new(),
            ),
            (reqwest::Method::DELETE, base.clone(), String::new()),
        ] {
            let (status, answer) = app.send(method.clone(), &b, &path, body).await;
            assert_eq!(status, 404, "{method} {path}: {answer}");
        }
    }
    let (status, body) = app
        .get(
            Some(&app.tenant_token("a")),
            &format!("/v1/webhooks/endpoints/{id}"),
        )
        .await;
    assert_eq!((status, body["enabled"].as_bool()), (200, Some(true)));
}

/// Item 15: names tenants and schedulers chose reach finance's spreadsheet as text, never
/// as a formula, in the statement CSV and the FOCUS file; the FOCUS validator's verdict is
/// the one the demo's month gets.
#[tokio::test]
async fn names_that_look_like_formulas_reach_the_exports_as_text() {
    use crate::chargeback::{bytes, split_csv, validate, VALIDATOR_DEFECT};
    const HOUR: &str = "2026-09-15T10:00:00Z";
    let app = TestApp::start().await;
    let mut b = scenario::batches_at(HOUR);
    b.sites[0]["fallback_price"] = json!("0.20");
    b.sites[0]["fallback_intensity_g"] = json!("300");
    b.sites[0]["name"] = json!("+cmd|' /C calc'!A0");
    b.tenants[1]["name"] = json!("=HYPERLINK(\"https://evil.example\",\"a\")");
    b.models[0]["key"] = json!("@SUM(1+1)");
    b.jobs[2]["model"] = json!("@SUM(1+1)");
    scenario::push(&app, &b).await;
    app.attribute().await;
    let finance = app.token(Role::Finance);
    let (status, body) = app
        .post_raw(&finance, "/v1/chargeback/months/2026-09/close", "{}".into())
        .await;
    assert_eq!(status, 201, "{body}");
    let dir = std::env::temp_dir().join(format!("wl-formula-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for format in ["csv", "focus"] {
        let path = format!("/v1/chargeback/months/2026-09/exports/{format}");
        let (status, content, _) = bytes(&app, &finance, &path).await;
        assert_eq!(status, 200);
        let text = String::from_utf8(content).unwrap();
        let mut seen = 0;
        for line in text.lines().skip(1) {
            for cell in split_csv(line) {
                let formula = cell.starts_with(['=', '+', '@', '\t', '\r'])
                    || (cell.starts_with('-') && cell.parse::<f64>().is_err());
                assert!(!formula, "{format}: a cell a spreadsheet would run: {cell}");
                seen += usize::from(
                    cell.starts_with("'=") || cell.starts_with("'@") || cell.starts_with("'+"),
                );
            }
        }
        assert!(
            seen > 0,
            "{format}: the hostile names are in the file, neutralised:\n{text}"
        );
        if format == "focus" {
            let file = dir.join("focus.csv");
            std::fs::write(&file, &text).unwrap();
            let (passed, failed) = validate(&file);
            assert!(
                passed || failed == [VALIDATOR_DEFECT],
                "FOCUS validator failures: {failed:?}"
            );
        }
    }
    // A CSV download carries the headers of tenant data too.
    let r = app
        .http
        .get(format!(
            "{}/v1/chargeback/months/2026-09/exports/csv",
            app.base
        ))
        .bearer_auth(&finance)
        .send()
        .await
        .unwrap();
    assert_eq!(r.headers()["x-content-type-options"], "nosniff");
    assert!(r.headers().contains_key("content-security-policy"));
}
