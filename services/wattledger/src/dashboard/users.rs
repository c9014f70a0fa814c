//! User administration (admin only): who can sign in, with which role, and a form to add a
//! user or reset one's password (generated and shown once unless one is typed); and who holds
//! a live API token, with a button to revoke each.

use super::format::grouped;
use super::table::{Column, Header, Key, Sort};
use super::{html, Form, Nav, PageError, Session};
use crate::auth::Role;
use crate::dashboard::login::{add_user, new_password};
use crate::state::AppState;
use askama::Template;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use rust_decimal::Decimal;
use serde::Deserialize;
use wattledger_store::{api_tokens, inventory, users};

pub struct UserView {
    pub username: String,
    pub role: Role,
    pub tenant: String,
    pub created: String,
    pub last_login: String,
    pub disabled: bool,
}

/// A live API token, as the admin's page lists it.
pub struct TokenRow {
    pub jti: String,
    pub sub: String,
    pub role: Role,
    pub tenant: String,
    pub issued: String,
    pub expires: String,
}

const USER_COLUMNS: [Column; 5] = [
    Column::text("user", "User"),
    Column::text("role", "Role"),
    Column::text("tenant", "Tenant"),
    Column::num("created", "Created"),
    Column::num("last_login", "Last sign-in"),
];

#[derive(serde::Deserialize, Default)]
pub struct View {
    sort: Option<String>,
}

#[derive(Template)]
#[template(path = "users.html")]
struct UsersPage {
    nav: Nav,
    headers: Vec<Header>,
    users: Vec<UserView>,
    tokens: Vec<TokenRow>,
    tenants: Vec<String>,
    notice: Option<String>,
    error: Option<String>,
    count: String,
}

fn admin_only(session: &Session) -> Result<(), PageError> {
    match session.role {
        Role::Admin => Ok(()),
        Role::Tenant => Err(PageError::NotFound),
        _ => Err(PageError::Forbidden),
    }
}

async fn render(
    state: &AppState,
    session: &Session,
    view: &View,
    status: StatusCode,
    notice: Option<String>,
    error: Option<String>,
) -> Result<Response, PageError> {
    let list = users::list(&state.pool).await?;
    let tenants = inventory::list_tenants(&state.pool, &wattledger_store::Scope::All)
        .await?
        .into_iter()
        .map(|t| t.key)
        .collect();
    let count = grouped(Decimal::from(list.len() as i64), 0);
    let sort = Sort::parse("sort", view.sort.as_deref(), &USER_COLUMNS, 0);
    let mut keyed: Vec<(Vec<Key>, UserView)> = list
        .into_iter()
        .map(|u| {
            let keys = vec![
                Key::Text(u.username.clone()),
                Key::Text(u.role.to_string()),
                Key::Text(u.tenant.clone().unwrap_or_default()),
                Key::Num(Decimal::from(u.created_at.timestamp())),
                Key::Num(Decimal::from(u.last_login_at.map_or(0, |t| t.timestamp()))),
            ];
            let row = UserView {
                username: u.username,
                role: u.role,
                tenant: u.tenant.unwrap_or_default(),
                created: u.created_at.format("%b %-d, %Y").to_string(),
                last_login: u
                    .last_login_at
                    .map(|t| t.format("%b %-d, %Y %H:%M UTC").to_string())
                    .unwrap_or_else(|| "never".into()),
                disabled: u.disabled,
            };
            (keys, row)
        })
        .collect();
    sort.apply(&mut keyed);
    let users = keyed.into_iter().map(|k| k.1).collect();
    let when = |t: chrono::DateTime<chrono::Utc>| t.format("%b %-d, %Y %H:%M UTC").to_string();
    let tokens = api_tokens::list(&state.pool, false, chrono::Utc::now())
        .await?
        .into_iter()
        .map(|t| TokenRow {
            jti: t.jti.to_string(),
            sub: t.sub,
            role: t.role,
            tenant: t.tenant.unwrap_or_default(),
            issued: when(t.issued_at),
            expires: when(t.expires_at),
        })
        .collect();
    let mut r = html(
        UsersPage {
            nav: Nav::new(session, "/admin/users"),
            headers: sort.headers(&USER_COLUMNS, ""),
            users,
            tokens,
            tenants,
            notice,
            error,
            count,
        }
        .render(),
    );
    *r.status_mut() = status;
    Ok(r)
}

pub async fn page(
    State(state): State<AppState>,
    session: Session,
    Query(view): Query<View>,
) -> Result<Response, PageError> {
    admin_only(&session)?;
    render(&state, &session, &view, StatusCode::OK, None, None).await
}

#[derive(Deserialize)]
pub struct NewUser {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    username: String,
    #[serde(default)]
    role: String,
    #[serde(default)]
    tenant: String,
    #[serde(default)]
    password: String,
}

pub async fn create(
    State(state): State<AppState>,
    session: Session,
    Form(f): Form<NewUser>,
) -> Result<Response, PageError> {
    admin_only(&session)?;
    if f.csrf != session.csrf {
        return Err(PageError::BadRequest(
            "The form expired; reload the page and try again.".into(),
        ));
    }
    let role = match Role::of_user(&f.role) {
        Some(role) => role,
        None => {
            return render(
                &state,
                &session,
                &View::default(),
                StatusCode::UNPROCESSABLE_ENTITY,
                None,
                Some("Pick a role.".into()),
            )
            .await
        }
    };
    let tenant = (role == Role::Tenant)
        .then_some(f.tenant.as_str())
        .filter(|t| !t.is_empty());
    let typed = !f.password.is_empty();
    let password = if typed {
        f.password.clone()
    } else {
        new_password().map_err(|e| PageError::Internal(e.to_string()))?
    };
    match add_user(&state.pool, &f.username, role, tenant, &password).await {
        Ok(()) => {
            let who = f.username.trim().to_lowercase();
            let notice = if typed {
                format!("{who} saved with the password you typed.")
            } else {
                format!("{who} saved. Their password, shown this once: {password}")
            };
            tracing::info!(by = %session.username, user = %who, role = role.as_str(), "dashboard user saved");
            render(
                &state,
                &session,
                &View::default(),
                StatusCode::OK,
                Some(notice),
                None,
            )
            .await
        }
        Err(e) => {
            render(
                &state,
                &session,
                &View::default(),
                StatusCode::UNPROCESSABLE_ENTITY,
                None,
                Some(format!("{e}.")),
            )
            .await
        }
    }
}

#[derive(Deserialize)]
pub struct Revoke {
    #[serde(default)]
    csrf: String,
}

/// Revokes an API token from the list (every replica refuses it at once).
pub async fn revoke_token(
    State(state): State<AppState>,
    session: Session,
    Path(jti): Path<String>,
    Form(f): Form<Revoke>,
) -> Result<Response, PageError> {
    admin_only(&session)?;
    if f.csrf != session.csrf {
        return Err(PageError::BadRequest(
            "The form expired; reload the page and try again.".into(),
        ));
    }
    let jti = uuid::Uuid::try_parse(&jti).map_err(|_| PageError::NotFound)?;
    let by = format!("dashboard:{}", session.username);
    let (status, notice, error) =
        match crate::auth::issue::revoke(&state.pool, &state.keys, jti, &by).await {
            Ok(t) => {
                tracing::info!(by = %session.username, %jti, "API token revoked");
                (
                    StatusCode::OK,
                    Some(format!(
                        "Token {jti} ({}, {}) revoked: no server accepts it any more.",
                        t.role, t.sub
                    )),
                    None,
                )
            }
            Err(wattledger_store::StoreError::NotFound) => (
                StatusCode::NOT_FOUND,
                None,
                Some(format!("No token {jti} was minted here.")),
            ),
            Err(e) => return Err(e.into()),
        };
    render(&state, &session, &View::default(), status, notice, error).await
}
