//! Tokens: every malformed, expired or foreign token is a 401; roles and tenants are enforced.

use crate::scenario;
use base64::Engine;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::json;
use wattledger::auth::{Role, AUDIENCE, ISSUER};
use wattledger_tests::{TestApp, SECRET};

fn claims(aud: &str, exp_offset: i64) -> serde_json::Value {
    let now = chrono::Utc::now().timestamp();
    json!({"sub": "x", "role": "admin", "iss": ISSUER, "aud": aud, "iat": now, "exp": now + exp_offset,
           "jti": uuid::Uuid::now_v7().to_string()})
}

fn sign(alg: Algorithm, claims: &serde_json::Value) -> String {
    jsonwebtoken::encode(
        &Header::new(alg),
        claims,
        &EncodingKey::from_secret(SECRET.as_bytes()),
    )
    .unwrap()
}

#[tokio::test]
async fn bad_tokens_get_401() {
    let app = TestApp::start().await;
    let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let none_token = format!(
        "{}.{}.",
        b64.encode(r#"{"alg":"none","typ":"JWT"}"#),
        b64.encode(claims(AUDIENCE, 600).to_string())
    );
    let mut no_exp = claims(AUDIENCE, 600);
    no_exp.as_object_mut().unwrap().remove("exp");
    let cases = [
        ("expired", sign(Algorithm::HS256, &claims(AUDIENCE, -3600))),
        (
            "wrong audience",
            sign(Algorithm::HS256, &claims("someone-else", 600)),
        ),
        (
            "wrong algorithm",
            sign(Algorithm::HS384, &claims(AUDIENCE, 600)),
        ),
        ("alg none", none_token),
        ("no exp", sign(Algorithm::HS256, &no_exp)),
        ("garbage", "not.a.token".to_owned()),
    ];
    for (what, token) in cases {
        let (status, body) = app.get(Some(&token), "/v1/usage").await;
        assert_eq!(status, 401, "{what}: {body}");
        assert_eq!(body["error"]["code"], "unauthorized");
    }
    let (status, _) = app.get(None, "/v1/usage").await;
    assert_eq!(status, 401);
    // The same claims, correctly signed, pass.
    let (status, _) = app
        .get(
            Some(&sign(Algorithm::HS256, &claims(AUDIENCE, 600))),
            "/v1/usage",
        )
        .await;
    assert_eq!(status, 200);
}

#[tokio::test]
async fn roles_are_enforced() {
    let app = TestApp::start().await;
    let (status, body) = app
        .get(Some(&app.token(Role::Collector)), "/v1/usage")
        .await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (403, Some("forbidden"))
    );
    let (status, _) = app
        .ingest(&app.token(Role::Finance), "samples", json!([]))
        .await;
    assert_eq!(status, 403);
    let (status, _) = app
        .ingest(&app.token(Role::Collector), "samples", json!([]))
        .await;
    assert_eq!(status, 200);
}

#[tokio::test]
async fn a_tenant_reads_only_its_own_rows() {
    let app = TestApp::start().await;
    scenario::push(&app, &scenario::batches()).await;
    app.attribute().await;
    let b = app.tenant_token("b");

    // Its own usage only.
    let totals = scenario::tenant_totals(&app, &b).await;
    assert_eq!(totals, vec![("b".to_owned(), scenario::EXPECTED_B)]);
    // Another tenant's ids look like nothing at all: 404, not 403.
    let (status, _) = app.get(Some(&b), "/v1/usage?tenant=a").await;
    assert_eq!(status, 404);
    let (status, _) = app.get(Some(&b), "/v1/jobs/job-train").await;
    assert_eq!(status, 404);
    let (status, _) = app.get(Some(&b), "/v1/jobs/no-such-job").await;
    assert_eq!(status, 404);
    // A shared endpoint that served b shows b its own share only.
    let (status, job) = app.get(Some(&b), "/v1/jobs/job-endpoint").await;
    assert_eq!(status, 200, "{job}");
    assert_eq!(job["total_mj"], 1_392_000_000i64);
    assert_eq!(job["prompt_tokens"], 2000);
    let (_, tenants) = app.get(Some(&b), "/v1/tenants").await;
    assert_eq!(tenants.as_array().unwrap().len(), 1);
    // A tenant token for a tenant that does not exist is not a valid token.
    let (status, _) = app.get(Some(&app.tenant_token("ghost")), "/v1/usage").await;
    assert_eq!(status, 401);
    // Finance sees everyone.
    let totals = scenario::tenant_totals(&app, &app.token(Role::Finance)).await;
    assert_eq!(totals.len(), 3);
}

/// A validly signed token is still input from outside: a NUL or a control character in any
/// of its string claims is a 401 on every door, never a 500 from PostgreSQL.
#[tokio::test]
async fn a_control_character_in_any_claim_of_a_signed_token_is_a_401() {
    let app = TestApp::start().await;
    scenario::push(&app, &scenario::batches()).await;
    let tenant_claims = || {
        let mut c = claims(AUDIENCE, 600);
        c["role"] = "tenant".into();
        c["tenant"] = "a".into();
        c
    };
    // The same claims, clean, pass: what fails below fails for the character alone.
    let (status, body) = app
        .get(Some(&sign(Algorithm::HS256, &tenant_claims())), "/v1/usage")
        .await;
    assert_eq!(status, 200, "{body}");
    let doors: [(reqwest::Method, &str); 5] = [
        (reqwest::Method::GET, "/v1/usage"),
        (reqwest::Method::GET, "/v1/jobs"),
        (reqwest::Method::GET, "/v1/budgets"),
        (reqwest::Method::GET, "/metrics"),
        (reqwest::Method::POST, "/v1/ingest/samples"),
    ];
    for claim in ["sub", "tenant", "jti"] {
        for (what, bad) in [
            ("NUL", "a\0b"),
            ("line break", "a\nb"),
            ("escape", "a\u{1b}b"),
        ] {
            let mut c = tenant_claims();
            c[claim] = bad.into();
            let token = sign(Algorithm::HS256, &c);
            for (method, path) in &doors {
                let (status, body) = app
                    .send(
                        method.clone(),
                        &token,
                        path,
                        json!({"records": []}).to_string(),
                    )
                    .await;
                assert_eq!(status, 401, "{claim} with a {what}, {path}: {body}");
                assert_eq!(body["error"]["code"], "unauthorized");
                let message = body["error"]["message"].as_str().unwrap();
                assert!(message.contains(claim), "{message}");
            }
        }
    }
}

/// A token without an id could never be revoked: it is refused, saying what to do.
#[tokio::test]
async fn a_token_without_an_id_is_refused_with_what_to_do() {
    let app = TestApp::start().await;
    let mut c = claims(AUDIENCE, 600);
    c.as_object_mut().unwrap().remove("jti");
    let (status, body) = app
        .get(Some(&sign(Algorithm::HS256, &c)), "/v1/usage")
        .await;
    assert_eq!(status, 401, "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("jti") && message.contains("mint a new one"),
        "{message}"
    );
}
