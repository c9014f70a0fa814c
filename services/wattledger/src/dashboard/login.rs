//! Signing in and out: argon2id password hashes, the session cookie, and a login CSRF token
//! (a random cookie the form must echo, so another site cannot sign a browser in).

use super::{cookie, html, PageError, Session, SESSION_COOKIE, SESSION_TTL_S};
use crate::auth::Role;
use crate::http::AppState;
use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use argon2::Argon2;
use askama::Template;
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use axum::Form;
use serde::Deserialize;
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
    let saved = users::upsert(pool, &username, &hash, role.as_str(), tenant).await?;
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

/// A hash to check against when the user does not exist, so that a wrong username takes as
/// long as a wrong password.
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
    let user = users::find(&state.pool, &username).await?;
    let ok = match &user {
        Some(u) => verify_password(&f.password, &u.password_hash) && !u.disabled,
        None => {
            let _ = verify_password(&f.password, decoy_hash());
            false
        }
    };
    let (Some(user), true) = (user, ok) else {
        tracing::info!(username = %username, "dashboard sign-in refused");
        return Ok(login_page(
            StatusCode::UNAUTHORIZED,
            &username,
            Some("That username and password do not match.".into()),
        ));
    };
    let role = match user.role.as_str() {
        "admin" => Role::Admin,
        "finance" => Role::Finance,
        "operator" => Role::Operator,
        _ => Role::Tenant,
    };
    let token = state
        .keys
        .mint(&user.username, role, user.tenant.as_deref(), SESSION_TTL_S)
        .map_err(|e| PageError::Internal(e.to_string()))?;
    users::touch_login(&state.pool, user.id).await?;
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

pub async fn logout(session: Session, Form(f): Form<LogoutForm>) -> Result<Response, PageError> {
    if f.csrf != session.csrf {
        return Err(PageError::BadRequest(
            "The form expired; reload the page and sign out again.".into(),
        ));
    }
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
}
