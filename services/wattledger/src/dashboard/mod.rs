//! The web dashboard: server-rendered pages (askama templates in the repository's
//! `templates/`) over the same store queries as the API, no JavaScript.
//!
//! A login exchanges a username and password (argon2 hash in `users`) for a session kept in
//! the database: the cookie (`HttpOnly; Secure; SameSite=Strict`) holds a random token whose
//! SHA-256 names the session, so signing out, a password reset or a change of role ends it at
//! once. Every form carries a CSRF token derived from the session token (a page from another
//! site can read neither). A tenant user sees only its own tenant: another tenant's pages
//! are 404, as pages that do not exist.

mod badput;
mod chart;
mod deferred;
mod finance;
pub mod format;
mod grid_event;
mod job;
pub mod login;
mod operator;
mod range;
mod serving;
mod table;
mod tenant;
mod users;

use crate::auth::Role;
use crate::state::AppState;
use askama::Template;
use axum::extract::{FromRef, FromRequestParts, State};
use axum::http::request::Parts;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;
use axum::Router;
use wattledger_store::Scope;

pub const SESSION_COOKIE: &str = "wl_session";
/// How long a session lasts, seconds.
pub const SESSION_TTL_S: i64 = 12 * 3600;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/", get(home))
        .route("/login", get(login::form).post(login::submit))
        .route("/logout", axum::routing::post(login::logout))
        .route("/tenants/{key}", get(tenant::overview))
        .route("/jobs/{key}", get(job::show))
        .route("/operator", get(operator::page))
        .route("/grid-events/{key}", get(grid_event::show))
        .route("/finance", get(finance::months))
        .route("/finance/{month}", get(finance::month))
        .route("/finance/{month}/exports/{format}", get(finance::download))
        .route("/admin/users", get(users::page).post(users::create))
        .route(
            "/admin/tokens/{jti}/revoke",
            axum::routing::post(users::revoke_token),
        )
        .route("/static/app.css", get(css))
        .route("/static/favicon.svg", get(favicon))
}

/// The session's key in the database: the SHA-256 of the cookie's token (a copy of the
/// table signs nobody in).
pub fn session_key(token: &str) -> String {
    wattledger_domain::chargeback::sha256_hex(token.as_bytes())
}

/// A signed-in user, from the session cookie.
#[derive(Debug, Clone)]
pub struct Session {
    pub username: String,
    pub role: Role,
    /// The tenant key of a tenant user.
    pub tenant: Option<String>,
    pub scope: Scope,
    /// The token every form of this session carries.
    pub csrf: String,
    /// The session's key in the database, to end it.
    pub token_key: String,
}

impl Session {
    pub fn is_finance(&self) -> bool {
        matches!(self.role, Role::Admin | Role::Finance)
    }
}

/// What a page shows in its header: who is signed in and where they can go.
pub struct Nav {
    pub username: String,
    pub role: Role,
    pub csrf: String,
    pub links: Vec<(String, String, bool)>,
}

impl Nav {
    fn new(s: &Session, current: &str) -> Nav {
        let mut links = Vec::new();
        if let Some(t) = &s.tenant {
            links.push((format!("/tenants/{t}"), "Overview".to_owned()));
        } else {
            links.push(("/".to_owned(), "Tenants".to_owned()));
        }
        if matches!(s.role, Role::Admin | Role::Operator | Role::Finance) {
            links.push(("/operator".to_owned(), "Operations".to_owned()));
        }
        if s.is_finance() {
            links.push(("/finance".to_owned(), "Finance".to_owned()));
        }
        if s.role == Role::Admin {
            links.push(("/admin/users".to_owned(), "Users".to_owned()));
        }
        Nav {
            username: s.username.clone(),
            role: s.role,
            csrf: s.csrf.clone(),
            links: links
                .into_iter()
                .map(|(href, label)| {
                    let here = current == href || (href != "/" && current.starts_with(&href));
                    (href, label, here)
                })
                .collect(),
        }
    }
}

/// A path segment, percent-encoded (job keys hold `:` and `/`).
pub fn segment(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The CSRF token of a session token: knowing it needs the token, which only the browser's
/// HttpOnly cookie holds.
pub fn csrf_for(token: &str) -> String {
    let mut hex =
        wattledger_domain::chargeback::sha256_hex(format!("wattledger-csrf:{token}").as_bytes());
    hex.truncate(32);
    hex
}

pub fn cookie(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.to_owned())
}

/// Why a page is not shown: sign in first, or a friendly error page.
#[derive(Debug)]
pub enum PageError {
    SignIn,
    NotFound,
    Forbidden,
    BadRequest(String),
    /// The declared body is over the limit (bytes).
    TooLarge(usize),
    Internal(String),
}

impl From<wattledger_store::StoreError> for PageError {
    fn from(e: wattledger_store::StoreError) -> Self {
        PageError::Internal(e.to_string())
    }
}

#[derive(Template)]
#[template(path = "error.html")]
struct ErrorPage {
    title: String,
    message: String,
    status: u16,
}

impl IntoResponse for PageError {
    fn into_response(self) -> Response {
        let (status, title, message) = match self {
            PageError::SignIn => return Redirect::to("/login").into_response(),
            PageError::NotFound => (
                StatusCode::NOT_FOUND,
                "Not found",
                "There is no such page, or it is not yours to see.".to_owned(),
            ),
            PageError::Forbidden => (
                StatusCode::FORBIDDEN,
                "Not for this account",
                "Your role cannot open this page. Ask an administrator if you need it.".to_owned(),
            ),
            PageError::BadRequest(m) => (StatusCode::BAD_REQUEST, "That did not work", m),
            PageError::TooLarge(limit) => (
                StatusCode::PAYLOAD_TOO_LARGE,
                "Too large",
                format!("The request is larger than the {limit} bytes this server accepts."),
            ),
            PageError::Internal(detail) => {
                tracing::error!(%detail, "dashboard page failed");
                (
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "Something went wrong",
                    "The page could not be built. It has been logged; try again in a moment."
                        .to_owned(),
                )
            }
        };
        let page = ErrorPage {
            title: title.to_owned(),
            message,
            status: status.as_u16(),
        };
        (status, html(page.render())).into_response()
    }
}

pub fn html(rendered: askama::Result<String>) -> Response {
    match rendered {
        Ok(body) => {
            let mut r = body.into_response();
            r.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/html; charset=utf-8"),
            );
            // Never cached, never framed, a strict policy: http::guard adds those to every
            // response, pages included.
            r
        }
        Err(e) => PageError::Internal(e.to_string()).into_response(),
    }
}

impl<S> FromRequestParts<S> for Session
where
    AppState: FromRef<S>,
    S: Send + Sync,
{
    type Rejection = PageError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let state = AppState::from_ref(state);
        let token = cookie(&parts.headers, SESSION_COOKIE).ok_or(PageError::SignIn)?;
        // Our tokens are 64 hex digits; anything else is not worth a query.
        if token.len() != 64 || !token.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(PageError::SignIn);
        }
        let token_key = session_key(&token);
        let user = wattledger_store::sessions::find(&state.pool, &token_key)
            .await?
            .ok_or(PageError::SignIn)?;
        // A service role cannot sign in (the users table's CHECK keeps it out anyway).
        let role = Some(user.role)
            .filter(|r| r.is_user())
            .ok_or(PageError::SignIn)?;
        let scope = match (role, user.tenant_id) {
            (Role::Tenant, Some(id)) => Scope::Tenant(id),
            (Role::Tenant, None) => return Err(PageError::SignIn),
            _ => Scope::All,
        };
        Ok(Session {
            username: user.username,
            role,
            tenant: user.tenant,
            scope,
            csrf: csrf_for(&token),
            token_key,
        })
    }
}

/// Longest value a dashboard form field may hold (a password included).
const MAX_FORM_FIELD: usize = 1024;

/// A form body (`application/x-www-form-urlencoded`) whose every name and value passed the
/// one text rule (`wattledger_domain::input::text`); what does not is a friendly 400.
pub struct Form<T>(pub T);

impl<S, T> axum::extract::FromRequest<S> for Form<T>
where
    S: Send + Sync,
    T: serde::de::DeserializeOwned,
{
    type Rejection = PageError;

    async fn from_request(req: axum::extract::Request, state: &S) -> Result<Self, PageError> {
        let unreadable = || {
            PageError::BadRequest(
                "The form could not be read; reload the page and try again.".into(),
            )
        };
        let is_form = req
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("application/x-www-form-urlencoded"));
        if !is_form {
            return Err(unreadable());
        }
        let bytes = axum::body::Bytes::from_request(req, state)
            .await
            .map_err(|_| unreadable())?;
        for (name, value) in form_urlencoded::parse(&bytes) {
            if let Err(e) = wattledger_domain::input::text(&name, 64)
                .and_then(|_| wattledger_domain::input::text(&value, MAX_FORM_FIELD))
            {
                let name: String = name.chars().filter(|c| !c.is_control()).take(32).collect();
                return Err(PageError::BadRequest(format!("The field '{name}' {e}.")));
            }
        }
        serde_urlencoded::from_bytes(&bytes)
            .map(Form)
            .map_err(|_| unreadable())
    }
}

/// A tenant user's home is its overview; everyone else picks a tenant.
async fn home(
    State(state): State<AppState>,
    session: Session,
    axum::extract::Query(view): axum::extract::Query<tenant::View>,
) -> Result<Response, PageError> {
    if let Some(t) = &session.tenant {
        return Ok(Redirect::to(&format!("/tenants/{t}")).into_response());
    }
    tenant::index(&state, &session, &view).await
}

async fn css() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/css; charset=utf-8"),
            (header::CACHE_CONTROL, "public, max-age=3600"),
        ],
        include_str!("../../../../templates/app.css"),
    )
        .into_response()
}

async fn favicon() -> Response {
    (
        [
            (header::CONTENT_TYPE, "image/svg+xml"),
            (header::CACHE_CONTROL, "public, max-age=86400"),
        ],
        include_str!("../../../../templates/favicon.svg"),
    )
        .into_response()
}
