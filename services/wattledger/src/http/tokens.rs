//! API tokens over the API (admin only): mint one (shown once, its id recorded), list them,
//! revoke one. A revoked token is refused at once by every replica (`auth::follow`).

use super::error::{ApiError, ApiResult, ErrorBody};
use super::extract::{Caller, Query, RawBatch};
use super::validate;
use crate::auth::issue::{self, IssueError, DEFAULT_TTL_S, MAX_NOTE_LEN};
use crate::auth::{AuthError, Role};
use crate::state::AppState;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::{delete, get};
use axum::{Json, Router};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::{IntoParams, ToSchema};
use uuid::Uuid;
use wattledger_domain::input::record::{Problem, Problems};
use wattledger_domain::role::TokenState;
use wattledger_store::api_tokens::{self as store, ApiToken};
use wattledger_store::StoreError;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/v1/tokens", get(list).post(mint))
        .route("/v1/tokens/{jti}", delete(revoke))
}

/// A minted token's record; the token itself is not kept.
#[derive(Debug, Serialize, ToSchema)]
pub struct TokenView {
    /// The token's id (its `jti` claim).
    pub jti: Uuid,
    /// Who or what the token is for.
    pub sub: String,
    pub role: Role,
    /// The tenant a tenant token is bound to.
    pub tenant: Option<String>,
    pub issued_at: DateTime<Utc>,
    pub expires_at: DateTime<Utc>,
    pub minted_by: String,
    pub note: String,
    pub revoked_at: Option<DateTime<Utc>>,
    pub revoked_by: Option<String>,
    pub state: TokenState,
}

impl TokenView {
    fn of(t: ApiToken, now: DateTime<Utc>) -> Self {
        let state = t.state(now);
        TokenView {
            jti: t.jti,
            sub: t.sub,
            role: t.role,
            tenant: t.tenant,
            issued_at: t.issued_at,
            expires_at: t.expires_at,
            minted_by: t.minted_by,
            note: t.note,
            revoked_at: t.revoked_at,
            revoked_by: t.revoked_by,
            state,
        }
    }
}

/// A new token: shown this once.
#[derive(Debug, Serialize, ToSchema)]
pub struct MintedToken {
    /// The bearer token. It is not stored: keep it now.
    pub token: String,
    #[serde(flatten)]
    pub record: TokenView,
}

#[derive(Debug, Deserialize, IntoParams)]
pub struct ListParams {
    /// Every token recorded, expired and revoked ones too (default: the live ones).
    #[serde(default)]
    pub all: bool,
}

/// The live tokens (not expired, not revoked), newest first; with `all=true`, every token.
#[utoipa::path(get, path = "/v1/tokens", tag = "tokens", params(ListParams),
    security(("bearer" = [])),
    responses((status = 200, body = Vec<TokenView>), (status = 401, body = ErrorBody),
              (status = 403, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn list(
    State(state): State<AppState>,
    caller: Caller,
    Query(params): Query<ListParams>,
) -> ApiResult<Json<Vec<TokenView>>> {
    caller.require(&[])?;
    let now = Utc::now();
    let tokens = store::list(&state.pool, params.all, now).await?;
    Ok(Json(
        tokens.into_iter().map(|t| TokenView::of(t, now)).collect(),
    ))
}

wattledger_domain::record! {
    /// A token to mint, as `POST /v1/tokens` asks for it.
    #[derive(Debug, Deserialize, ToSchema)]
    #[serde(deny_unknown_fields)]
    pub struct MintRequest {
        pub role: Role => Role::Admin,
        /// Who or what the token is for (a key: no control characters, at most 256 bytes).
        pub sub: String => String::new(),
        /// The tenant's key: for, and only for, a tenant token.
        #[serde(default)]
        pub tenant: Option<String> => None,
        /// Lifetime, seconds: a day by default, at most `WATTLEDGER_TOKEN_MAX_TTL` (the
        /// default if that is shorter).
        #[serde(default)]
        pub ttl_s: Option<i64> => None,
        #[serde(default)]
        pub note: Option<String> => None,
    }
}

impl MintRequest {
    /// Everything wrong with the request on its own, `max_ttl_s` being the longest lifetime
    /// this server allows. `refused` names the fields the reading refused already: with a
    /// refused role, whether the token needs a tenant is not known.
    fn check(&self, refused: impl Fn(&str) -> bool, max_ttl_s: i64) -> Vec<Problem> {
        let mut p = Problems::default();
        p.key("sub", &self.sub);
        let tenant = self.tenant.as_deref().filter(|t| p.key("tenant", t));
        if !refused("role") && (self.role == Role::Tenant) != tenant.is_some() {
            p.add(
                "tenant",
                "a tenant token needs a tenant, and only a tenant token may have one",
            );
        }
        if self.ttl_s.is_some_and(|t| !(1..=max_ttl_s).contains(&t)) {
            p.add(
                "ttl_s",
                format!("must be between 1 and {max_ttl_s} seconds (WATTLEDGER_TOKEN_MAX_TTL)"),
            );
        }
        if let Some(note) = &self.note {
            p.text("note", note, MAX_NOTE_LEN);
        }
        p.done()
    }
}

/// Mints a token (admin): `role`, `sub`, `tenant` (for, and only for, a tenant token),
/// `ttl_s` (default a day, at most `WATTLEDGER_TOKEN_MAX_TTL`, the default if shorter), `note`. The answer holds the
/// token, this once.
#[utoipa::path(post, path = "/v1/tokens", tag = "tokens",
    request_body = MintRequest,
    security(("bearer" = [])),
    responses((status = 201, body = MintedToken), (status = 400, body = ErrorBody),
              (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
              (status = 413, body = ErrorBody), (status = 415, body = ErrorBody),
              (status = 422, body = ErrorBody)))]
pub async fn mint(
    State(state): State<AppState>,
    caller: Caller,
    RawBatch(body): RawBatch,
) -> ApiResult<(StatusCode, Json<MintedToken>)> {
    caller.require(&[])?;
    let value: Value = super::json::parse(&body)?;
    let max = state.keys.max_ttl_s();
    let asked = validate::checked(&value, |a: &MintRequest, refused| a.check(refused, max))
        .map_err(ApiError::Validation)?;
    let role = asked.role;
    let request = issue::Request {
        sub: &asked.sub,
        role,
        tenant: asked.tenant.as_deref(),
        ttl_s: asked.ttl_s.unwrap_or(DEFAULT_TTL_S.min(max)),
        minted_by: &caller.subject,
        note: asked.note.as_deref().unwrap_or_default(),
    };
    let issued = issue::issue(&state.pool, &state.keys, &request)
        .await
        .map_err(|e| match e {
            IssueError::Store(e) => ApiError::Store(e),
            IssueError::UnknownTenant(_) => {
                ApiError::Validation(vec![super::error::FieldError::new(
                    0,
                    "tenant",
                    e.to_string(),
                )])
            }
            IssueError::Token(AuthError::TooLong { .. } | AuthError::NoLifetime) => {
                ApiError::Validation(vec![super::error::FieldError::new(
                    0,
                    "ttl_s",
                    e.to_string(),
                )])
            }
            other => ApiError::BadRequest(other.to_string()),
        })?;
    tracing::info!(by = %caller.subject, jti = %issued.record.jti, role = role.as_str(), "API token minted");
    Ok((
        StatusCode::CREATED,
        Json(MintedToken {
            token: issued.token,
            record: TokenView::of(issued.record, Utc::now()),
        }),
    ))
}

/// Revokes a token (admin): every replica refuses it from now on. Revoking it again
/// changes nothing.
#[utoipa::path(delete, path = "/v1/tokens/{jti}", tag = "tokens",
    params(("jti" = String, Path, description = "The token's id")), security(("bearer" = [])),
    responses((status = 200, body = TokenView), (status = 401, body = ErrorBody),
              (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub async fn revoke(
    State(state): State<AppState>,
    caller: Caller,
    Path(jti): Path<String>,
) -> ApiResult<Json<TokenView>> {
    caller.require(&[])?;
    let jti = Uuid::try_parse(&jti).map_err(|_| ApiError::NotFound)?;
    let token = issue::revoke(&state.pool, &state.keys, jti, &caller.subject)
        .await
        .map_err(|e| match e {
            StoreError::NotFound => ApiError::NotFound,
            e => ApiError::Store(e),
        })?;
    tracing::info!(by = %caller.subject, %jti, "API token revoked");
    Ok(Json(TokenView::of(token, Utc::now())))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The fields the reading and the check refuse in `v`, a day being the longest lifetime.
    fn refused(v: Value) -> Vec<String> {
        match validate::checked(&v, |a: &MintRequest, refused| a.check(refused, 86_400)) {
            Ok(_) => vec![],
            Err(e) => e.into_iter().map(|e| e.field).collect(),
        }
    }

    #[test]
    fn a_tenant_token_and_only_it_names_a_tenant() {
        assert!(refused(json!({"role": "tenant", "sub": "t", "tenant": "a"})).is_empty());
        assert_eq!(refused(json!({"role": "tenant", "sub": "t"})), ["tenant"]);
        assert_eq!(
            refused(json!({"role": "admin", "sub": "t", "tenant": "a"})),
            ["tenant"]
        );
        // A refused role cannot say whether the token needs a tenant; a refused tenant key
        // says what is wrong on its own.
        assert_eq!(
            refused(json!({"role": "root", "sub": "t", "tenant": "a"})),
            ["role"]
        );
        assert_eq!(
            refused(json!({"role": "admin", "sub": "t", "tenant": "a\nb"})),
            ["tenant"]
        );
    }

    #[test]
    fn every_field_is_named_in_order() {
        assert_eq!(
            refused(json!({"scope": "all", "note": 5, "ttl_s": 0, "sub": "a\nb", "role": 1})),
            ["scope", "role", "sub", "ttl_s", "note"]
        );
        assert_eq!(
            refused(json!({"role": "admin", "sub": "t", "ttl_s": 86_401})),
            ["ttl_s"]
        );
        assert!(refused(json!({"role": "admin", "sub": "t", "ttl_s": 86_400})).is_empty());
    }
}
