//! Signing in and out: argon2id password hashes, server-side sessions behind the cookie, a
//! login CSRF token (a random cookie the form must echo, so another site cannot sign a
//! browser in), and growing delays after failed attempts, per name typed and per client
//! address, answered alike whether the name exists or not.

use super::{cookie, html, session_key, Form, PageError, Session, SESSION_COOKIE, SESSION_TTL_S};
use crate::auth::Role;
use crate::server::client_addr::ClientAddr;
use crate::state::AppState;
use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use argon2::Argon2;
use askama::Template;
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use chrono::Duration;
use serde::Deserialize;
use wattledger_store::sessions::{self, FailureKey};
use wattledger_store::users;

const LOGIN_CSRF_COOKIE: &str = "wl_login";

/// An argon2id hash (PHC string) of `password` with a fresh random salt.
pub fn hash_password(password: &str) -> anyhow::Result<String> {
    let salt_bytes = crate::random_bytes(16)?;
    let salt = SaltString::encode_b64(&salt_bytes).map_err(|e| anyhow::anyhow!("salt: {e}"))?;
    Ok(Argon2::default()
        .hash_password(password.as_bytes(), &salt)
        .map_err(|e| anyhow::anyhow!("hashing: {e}"))?
        .to_string())
}

/// A random password people can type: 20 characters from a 56-letter alphabet (~116 bits).
pub fn new_password() -> anyhow::Result<String> {
    const ALPHABET: &[u8] = b"abcdefghijkmnpqrstuvwxyzABCDEFGHJKLMNPQRSTUVWXYZ23456789";
    Ok(crate::random_bytes(20)?
        .iter()
        .map(|b| ALPHABET[usize::from(*b) % ALPHABET.len()] as char)
        .collect())
}

/// Creates (or replaces) a dashboard user. Usernames are lower case; passwords at least 12
/// characters; a tenant user names an existing tenant.
pub async fn add_user(
    pool: &sqlx::PgPool,
    username: &str,
    role: Role,
    tenant: Option<&str>,
    password: &str,
) -> anyhow::Result<()> {
    let username = username.trim().to_lowercase();
    anyhow::ensure!(
        !username.is_empty()
            && username.len() <= 64
            && username
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "._@-".contains(c)),
        "a username is 1 to 64 of a-z, 0-9, '.', '_', '@', '-'"
    );
    anyhow::ensure!(
        password.chars().count() >= 12,
        "a password needs at least 12 characters"
    );
    anyhow::ensure!(
        matches!(
            role,
            Role::Admin | Role::Finance | Role::Operator | Role::Tenant
        ),
        "dashboard users are admin, finance, operator or tenant"
    );
    anyhow::ensure!(
        (role == Role::Tenant) == tenant.is_some(),
        "--tenant is required for, and only for, --role tenant"
    );
    let hash = hash_password(password)?;
    let saved = users::upsert(pool, &username, &hash, role, tenant).await?;
    anyhow::ensure!(
        saved.is_some(),
        "no tenant '{}'",
        tenant.unwrap_or_default()
    );
    Ok(())
}

fn verify_password(password: &str, hash: &str) -> bool {
    PasswordHash::new(hash)
        .map(|h| {
            Argon2::default()
                .verify_password(password.as_bytes(), &h)
                .is_ok()
        })
        .unwrap_or(false)
}

/// Makes the decoy hash now (at start), off the async workers.
pub fn prepare_decoy() {
    decoy_hash();
}

/// A hash to check against when the user does not exist, so that a wrong username takes as
/// long as a wrong password: made by [`hash_password`], so with the same argon2 parameters
/// (memory, passes, lanes) as every user's.
fn decoy_hash() -> &'static str {
    static DECOY: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    DECOY.get_or_init(|| hash_password("decoy").unwrap_or_default())
}

#[derive(Template)]
#[template(path = "login.html")]
struct LoginPage {
    csrf: String,
    username: String,
    error: Option<String>,
}

fn set_cookie(r: &mut Response, value: String) {
    if let Ok(v) = HeaderValue::from_str(&value) {
        r.headers_mut().append(header::SET_COOKIE, v);
    }
}

fn login_page(status: StatusCode, username: &str, error: Option<String>) -> Response {
    let csrf = crate::random_hex(16).unwrap_or_default();
    let page = LoginPage {
        csrf: csrf.clone(),
        username: username.to_owned(),
        error,
    };
    let mut r = html(page.render());
    *r.status_mut() = status;
    set_cookie(
        &mut r,
        format!("{LOGIN_CSRF_COOKIE}={csrf}; Path=/login; HttpOnly; Secure; SameSite=Strict; Max-Age=3600"),
    );
    r
}

pub async fn form() -> Response {
    login_page(StatusCode::OK, "", None)
}

/// Failed sign-ins in a row answered at once, per name typed; past them, each failure blocks
/// sign-in for that name for twice as long as the one before (1 s, 2 s, 4 s, … 15 min).
const FREE_FAILURES_PER_USER: i32 = 5;
/// The same per client address, looser: colleagues behind one NAT mistype too.
const FREE_FAILURES_PER_ADDRESS: i32 = 20;
const LONGEST_BLOCK_S: i64 = 900;
/// Failures older than this are forgotten: the count starts again.
const QUIET: Duration = Duration::minutes(15);

/// How long sign-in stays blocked after `failures` failures in a row, `free` of them free.
fn block_after(failures: i32, free: i32) -> Option<Duration> {
    let over = failures - free;
    (over > 0).then(|| Duration::seconds((1i64 << (over - 1).min(20)).min(LONGEST_BLOCK_S)))
}

#[derive(Deserialize)]
pub struct LoginForm {
    #[serde(default)]
    username: String,
    #[serde(default)]
    password: String,
    #[serde(default)]
    csrf: String,
}

pub async fn submit(
    State(state): State<AppState>,
    headers: HeaderMap,
    ClientAddr(addr): ClientAddr,
    Form(f): Form<LoginForm>,
) -> Result<Response, PageError> {
    let expected = cookie(&headers, LOGIN_CSRF_COOKIE).unwrap_or_default();
    if expected.is_empty() || f.csrf != expected {
        return Ok(login_page(
            StatusCode::FORBIDDEN,
            &f.username,
            Some("The form expired. Please sign in again.".into()),
        ));
    }
    let username = f.username.trim().to_lowercase();
    let mut keys = vec![FailureKey::User(&username)];
    if let Some(a) = &addr {
        keys.push(FailureKey::Address(a));
    }
    // Blocked: refused before the password is even looked at, the same for every name.
    if let Some(until) = sessions::blocked_until(&state.pool, &keys).await? {
        let wait = (until - chrono::Utc::now()).num_seconds().max(1);
        tracing::info!(username = %username, address = ?addr, wait_s = wait, "dashboard sign-in throttled");
        let mut r = login_page(
            StatusCode::TOO_MANY_REQUESTS,
            &username,
            Some(format!(
                "Too many failed sign-ins. Try again in {wait} second{}.",
                if wait == 1 { "" } else { "s" }
            )),
        );
        if let Ok(v) = HeaderValue::from_str(&wait.to_string()) {
            r.headers_mut().insert(header::RETRY_AFTER, v);
        }
        return Ok(r);
    }
    let user = users::find(&state.pool, &username).await?;
    let ok = match &user {
        Some(u) => verify_password(&f.password, &u.password_hash) && !u.disabled,
        None => {
            let _ = verify_password(&f.password, decoy_hash());
            false
        }
    };
    let (Some(user), true) = (user, ok) else {
        for key in &keys {
            let free = match key {
                FailureKey::User(_) => FREE_FAILURES_PER_USER,
                FailureKey::Address(_) => FREE_FAILURES_PER_ADDRESS,
            };
            sessions::record_failure(&state.pool, *key, QUIET, |n| block_after(n, free)).await?;
        }
        tracing::info!(username = %username, address = ?addr, "dashboard sign-in refused");
        return Ok(login_page(
            StatusCode::UNAUTHORIZED,
            &username,
            Some("That username and password do not match.".into()),
        ));
    };
    sessions::clear_failures(&state.pool, FailureKey::User(&username)).await?;
    let token = crate::random_hex(32).map_err(|e| PageError::Internal(e.to_string()))?;
    sessions::start(
        &state.pool,
        user.id,
        &session_key(&token),
        Duration::seconds(SESSION_TTL_S),
    )
    .await?;
    let mut r = Redirect::to("/").into_response();
    set_cookie(
        &mut r,
        format!("{SESSION_COOKIE}={token}; Path=/; HttpOnly; Secure; SameSite=Strict; Max-Age={SESSION_TTL_S}"),
    );
    set_cookie(
        &mut r,
        format!("{LOGIN_CSRF_COOKIE}=; Path=/login; Max-Age=0"),
    );
    Ok(r)
}

#[derive(Deserialize)]
pub struct LogoutForm {
    #[serde(default)]
    csrf: String,
}

pub async fn logout(
    State(state): State<AppState>,
    session: Session,
    Form(f): Form<LogoutForm>,
) -> Result<Response, PageError> {
    if f.csrf != session.csrf {
        return Err(PageError::BadRequest(
            "The form expired; reload the page and sign out again.".into(),
        ));
    }
    sessions::end(&state.pool, &session.token_key).await?;
    let mut r = Redirect::to("/login").into_response();
    set_cookie(
        &mut r,
        format!("{SESSION_COOKIE}=; Path=/; HttpOnly; Secure; SameSite=Strict; Max-Age=0"),
    );
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashes_verify_and_differ_by_salt() {
        let a = hash_password("correct horse").unwrap();
        let b = hash_password("correct horse").unwrap();
        assert!(a.starts_with("$argon2id$"));
        assert_ne!(a, b);
        assert!(verify_password("correct horse", &a));
        assert!(!verify_password("correct horse!", &a));
        assert!(!verify_password("x", "not a hash"));
        assert_eq!(super::super::csrf_for("t").len(), 32);
    }

    /// A sign-in with an unknown name does the very hash work of a known one: the decoy is
    /// an argon2id hash of the same version and parameters as a user's, and is checked.
    #[test]
    fn the_decoy_costs_what_a_users_hash_costs() {
        let user = hash_password("correct horse battery").unwrap();
        let params = |phc: &str| {
            let h = PasswordHash::new(phc).unwrap();
            (h.algorithm.to_string(), h.version, h.params.to_string())
        };
        prepare_decoy();
        assert_eq!(params(decoy_hash()), params(&user));
        assert!(
            params(&user).2.contains("m=19456,t=2,p=1"),
            "{:?}",
            params(&user)
        );
        assert!(!verify_password("correct horse battery", decoy_hash()));
    }

    #[test]
    fn failures_past_the_free_ones_block_for_doubling_times_up_to_a_cap() {
        assert_eq!(block_after(5, 5), None);
        assert_eq!(block_after(6, 5), Some(Duration::seconds(1)));
        assert_eq!(block_after(7, 5), Some(Duration::seconds(2)));
        assert_eq!(block_after(10, 5), Some(Duration::seconds(16)));
        assert_eq!(block_after(15, 5), Some(Duration::seconds(512)));
        assert_eq!(block_after(16, 5), Some(Duration::seconds(900)));
        assert_eq!(block_after(i32::MAX, 5), Some(Duration::seconds(900)));
        assert_eq!(block_after(20, 20), None);
    }
}
