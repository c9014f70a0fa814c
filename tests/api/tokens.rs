//! API tokens recorded and revoked: minted over the API and the CLI, listed, revoked, and
//! then refused by every replica at once; the maximum lifetime at mint and at verify.

use crate::agent::binary;
use crate::dashboard::{hidden, Browser};
use serde_json::{json, Value};
use std::process::Command;
use std::time::{Duration, Instant};
use wattledger::auth::{Keys, Role};
use wattledger_tests::{TestApp, SECRET};

/// How long a replica may take to hear of a revocation before the test gives up: the
/// notification arrives in milliseconds; the periodic reload (a minute) is far beyond it.
const HEARD_WITHIN: Duration = Duration::from_secs(10);

/// Polls `path` with `token` until it answers 401, and returns that answer's body.
async fn refused_soon(app: &TestApp, token: &str, path: &str) -> Value {
    let start = Instant::now();
    loop {
        let (status, body) = app.get(Some(token), path).await;
        if status == 401 {
            return body;
        }
        assert_eq!(status, 200, "{body}");
        assert!(
            start.elapsed() < HEARD_WITHIN,
            "{path} on {} still accepts the revoked token",
            app.base
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn jtis(list: &Value) -> Vec<&str> {
    list.as_array()
        .unwrap()
        .iter()
        .map(|t| t["jti"].as_str().unwrap())
        .collect()
}

#[tokio::test]
async fn a_token_minted_over_the_api_is_listed_and_revoked_on_every_replica() {
    let app = TestApp::start().await;
    let replica = app.replica().await;
    let admin = app.token(Role::Admin);

    let (status, minted) = app
        .post_raw(
            &admin,
            "/v1/tokens",
            json!({"role": "operator", "sub": "grafana", "ttl_s": 3600, "note": "dashboards"})
                .to_string(),
        )
        .await;
    assert_eq!(status, 201, "{minted}");
    let token = minted["token"].as_str().unwrap().to_owned();
    let jti = minted["jti"].as_str().unwrap().to_owned();
    assert_eq!(
        (
            minted["role"].as_str(),
            minted["sub"].as_str(),
            minted["minted_by"].as_str(),
            minted["note"].as_str(),
            minted["state"].as_str()
        ),
        (
            Some("operator"),
            Some("grafana"),
            Some("test"),
            Some("dashboards"),
            Some("live")
        )
    );
    // The token is the record's: its id is the jti listed.
    assert_eq!(app.keys.verify(&token).unwrap().jti.to_string(), jti);
    for server in [&app, &replica] {
        let (status, body) = server.get(Some(&token), "/v1/usage").await;
        assert_eq!(status, 200, "{body}");
    }
    let (status, list) = app.get(Some(&admin), "/v1/tokens").await;
    assert_eq!(status, 200, "{list}");
    assert_eq!(jtis(&list), vec![jti.as_str()]);
    // Only an admin sees or mints tokens.
    let finance = app.token(Role::Finance);
    assert_eq!(app.get(Some(&finance), "/v1/tokens").await.0, 403);
    let (status, _) = app
        .post_raw(
            &finance,
            "/v1/tokens",
            json!({"role": "admin", "sub": "me"}).to_string(),
        )
        .await;
    assert_eq!(status, 403);

    // Revoked on one server: refused there at once, and by the replica as soon as the
    // notification reaches it (there is no request to the database per token).
    let (status, revoked) = app
        .send(
            reqwest::Method::DELETE,
            &admin,
            &format!("/v1/tokens/{jti}"),
            String::new(),
        )
        .await;
    assert_eq!(status, 200, "{revoked}");
    assert_eq!(revoked["state"], "revoked");
    assert_eq!(revoked["revoked_by"], "test");
    let (status, body) = app.get(Some(&token), "/v1/usage").await;
    assert_eq!(status, 401, "{body}");
    assert_eq!(body["error"]["message"], "this token was revoked");
    let body = refused_soon(&replica, &token, "/v1/usage").await;
    assert_eq!(body["error"]["message"], "this token was revoked");
    // Another token of the same role is untouched.
    assert_eq!(
        replica
            .get(Some(&replica.token(Role::Operator)), "/v1/usage")
            .await
            .0,
        200
    );

    // No longer live; listed with all, as revoked.
    let (_, list) = replica.get(Some(&admin), "/v1/tokens").await;
    assert!(jtis(&list).is_empty(), "{list}");
    let (_, all) = replica.get(Some(&admin), "/v1/tokens?all=true").await;
    assert_eq!(jtis(&all), vec![jti.as_str()]);
    assert_eq!(all[0]["state"], "revoked");
    // Revoking again changes nothing; an id never minted is not found.
    let again = app
        .send(
            reqwest::Method::DELETE,
            &admin,
            &format!("/v1/tokens/{jti}"),
            String::new(),
        )
        .await;
    assert_eq!(
        (again.0, &again.1["revoked_at"]),
        (200, &revoked["revoked_at"])
    );
    for unknown in [uuid::Uuid::now_v7().to_string(), "not-an-id".to_owned()] {
        let (status, _) = app
            .send(
                reqwest::Method::DELETE,
                &admin,
                &format!("/v1/tokens/{unknown}"),
                String::new(),
            )
            .await;
        assert_eq!(status, 404, "{unknown}");
    }
}

#[tokio::test]
async fn a_replica_started_after_a_revocation_refuses_the_token_from_its_first_request() {
    let app = TestApp::start().await;
    let admin = app.token(Role::Admin);
    let (_, minted) = app
        .post_raw(
            &admin,
            "/v1/tokens",
            json!({"role": "finance", "sub": "sheet"}).to_string(),
        )
        .await;
    let token = minted["token"].as_str().unwrap();
    let jti = minted["jti"].as_str().unwrap();
    let (status, _) = app
        .send(
            reqwest::Method::DELETE,
            &admin,
            &format!("/v1/tokens/{jti}"),
            String::new(),
        )
        .await;
    assert_eq!(status, 200);
    let late = app.replica().await;
    let (status, body) = late.get(Some(token), "/v1/usage").await;
    assert_eq!(status, 401, "{body}");
}

#[tokio::test]
async fn a_revocation_whose_notification_was_lost_heals_at_the_next_reload() {
    let app = TestApp::start_with(|c| c.token_reload_ms = 200).await;
    let admin = app.token(Role::Admin);
    let (_, minted) = app
        .post_raw(
            &admin,
            "/v1/tokens",
            json!({"role": "operator", "sub": "lost"}).to_string(),
        )
        .await;
    let token = minted["token"].as_str().unwrap();
    let jti: uuid::Uuid = minted["jti"].as_str().unwrap().parse().unwrap();
    // Revoked behind the server's back: no notification.
    sqlx::query("UPDATE api_tokens SET revoked_at = now(), revoked_by = 'dba' WHERE jti = $1")
        .bind(jti)
        .execute(&app.pool)
        .await
        .unwrap();
    refused_soon(&app, token, "/v1/usage").await;
}

#[tokio::test]
async fn the_maximum_lifetime_is_refused_at_mint_and_at_verify() {
    let app = TestApp::start_with(|c| c.token_max_ttl = 3600).await;
    crate::scenario::push(&app, &crate::scenario::batches()).await;
    let admin = app.token(Role::Admin);
    let mint = |body: Value| {
        let (app, admin) = (&app, &admin);
        async move { app.post_raw(admin, "/v1/tokens", body.to_string()).await }
    };
    let (status, body) = mint(json!({"role": "collector", "sub": "agent", "ttl_s": 3601})).await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(body["error"]["errors"][0]["field"], "ttl_s");
    let (status, body) = mint(json!({"role": "collector", "sub": "agent", "ttl_s": 3600})).await;
    assert_eq!(status, 201, "{body}");
    // Other refusals name their field.
    for (req, field) in [
        (
            json!({"role": "tenant", "sub": "t", "tenant": "ghost"}),
            "tenant",
        ),
        (json!({"role": "tenant", "sub": "t"}), "tenant"),
        (
            json!({"role": "admin", "sub": "t", "tenant": "a"}),
            "tenant",
        ),
        (json!({"role": "root", "sub": "t"}), "role"),
        (json!({"role": "admin", "sub": "a\nb"}), "sub"),
        (json!({"role": "admin", "sub": "t", "ttl_s": 0}), "ttl_s"),
        (
            json!({"role": "admin", "sub": "t", "scope": "all"}),
            "scope",
        ),
    ] {
        let (status, body) = mint(req.clone()).await;
        assert_eq!(status, 422, "{req}: {body}");
        assert_eq!(body["error"]["errors"][0]["field"], field, "{req}: {body}");
    }
    let (status, body) = mint(json!({"role": "tenant", "sub": "t", "tenant": "a"})).await;
    assert_eq!(status, 201, "{body}");
    // A token signed with the same key but living longer than this server allows.
    let long = Keys::new(SECRET.as_bytes())
        .unwrap()
        .mint("x", Role::Admin, None, 7200)
        .unwrap();
    let (status, body) = app.get(Some(&long), "/v1/usage").await;
    assert_eq!(status, 401, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("WATTLEDGER_TOKEN_MAX_TTL"),
        "{body}"
    );
}

/// `wattledger token …` against the server's database, as an operator would run it.
fn cli(app: &TestApp, args: &[&str]) -> (bool, String, String) {
    let out = Command::new(binary("wattledger"))
        .arg("token")
        .args(args)
        .env("DATABASE_URL", &app.db_url)
        .env("WATTLEDGER_JWT_SECRET", SECRET)
        .env("WATTLEDGER_TOKEN_MAX_TTL", "30d")
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test]
async fn the_cli_mints_lists_and_revokes() {
    let app = TestApp::start().await;
    let (ok, stdout, stderr) = cli(
        &app,
        &[
            "mint",
            "--role",
            "operator",
            "--sub",
            "prometheus",
            "--note",
            "scrape",
        ],
    );
    assert!(ok, "{stderr}");
    let token = stdout.trim().to_owned();
    let jti = app.keys.verify(&token).unwrap().jti.to_string();
    assert!(stderr.contains(&jti), "{stderr}");
    assert_eq!(app.get(Some(&token), "/v1/usage").await.0, 200);

    let (ok, list, stderr) = cli(&app, &["list"]);
    assert!(ok, "{stderr}");
    let line = list.lines().find(|l| l.starts_with(&jti)).expect(&list);
    assert!(line.contains("operator") && line.contains("prometheus") && line.ends_with("live"));

    // Longer than the configured maximum: refused, nothing recorded.
    let (ok, _, stderr) = cli(
        &app,
        &[
            "mint",
            "--role",
            "operator",
            "--ttl-s",
            &(31 * 86_400).to_string(),
        ],
    );
    assert!(!ok);
    assert!(stderr.contains("WATTLEDGER_TOKEN_MAX_TTL"), "{stderr}");

    let (ok, stdout, stderr) = cli(&app, &["revoke", &jti, "--by", "oncall"]);
    assert!(ok, "{stderr}");
    assert!(stdout.contains("revoked"), "{stdout}");
    // The server hears of it from the database.
    refused_soon(&app, &token, "/v1/usage").await;
    let (_, list, _) = cli(&app, &["list"]);
    assert!(!list.contains(&jti), "{list}");
    let (_, all, _) = cli(&app, &["list", "--all"]);
    let line = all.lines().find(|l| l.starts_with(&jti)).expect(&all);
    assert!(
        line.contains("revoked") && line.ends_with("by oncall"),
        "{line}"
    );
    let (ok, _, stderr) = cli(&app, &["revoke", &uuid::Uuid::now_v7().to_string()]);
    assert!(!ok);
    assert!(stderr.contains("no token"), "{stderr}");
}

#[tokio::test]
async fn an_admin_sees_the_live_tokens_on_the_users_page_and_revokes_one() {
    let app = crate::dashboard::app_with_users().await;
    let admin = app.token(Role::Admin);
    let (status, minted) = app
        .post_raw(
            &admin,
            "/v1/tokens",
            json!({"role": "tenant", "tenant": "a", "sub": "notebook"}).to_string(),
        )
        .await;
    assert_eq!(status, 201, "{minted}");
    let token = minted["token"].as_str().unwrap();
    let jti = minted["jti"].as_str().unwrap();
    let action = format!("/admin/tokens/{jti}/revoke");

    let mut ada = Browser::new(&app);
    ada.sign_in("ada", "correct horse battery").await;
    let page = ada.get("/admin/users").await;
    assert_eq!(page.status, 200);
    assert!(page.body.contains("Live API tokens"));
    let row = &page.body[page
        .body
        .find(&format!("<code>{jti}</code>"))
        .expect(&page.body)..];
    let row = &row[..row.find("</tr>").unwrap()];
    assert!(
        row.contains("<td>notebook</td><td>tenant</td><td>a</td>") && row.contains(&action),
        "{row}"
    );
    let csrf = hidden(&page.body, "csrf");

    // Other roles cannot, and neither can a form from elsewhere.
    for (user, home, status) in [("fin", "/finance", 403), ("alice", "/tenants/a", 404)] {
        let mut b = Browser::new(&app);
        b.sign_in(user, "correct horse battery").await;
        let csrf = hidden(&b.get(home).await.body, "csrf");
        assert_eq!(
            b.post(&action, &[("csrf", &csrf)], None).await.status,
            status
        );
    }
    assert_eq!(
        ada.post(&action, &[("csrf", "forged")], None).await.status,
        400
    );
    assert_eq!(app.get(Some(token), "/v1/usage").await.0, 200);

    let page = ada.post(&action, &[("csrf", &csrf)], None).await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(page.body.contains("revoked"), "{}", page.body);
    assert!(!page.body.contains(&action), "still listed as live");
    assert_eq!(app.get(Some(token), "/v1/usage").await.0, 401);
    let (_, all) = app.get(Some(&admin), "/v1/tokens?all=true").await;
    assert_eq!(all[0]["revoked_by"], "dashboard:ada");
}
