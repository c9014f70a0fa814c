//! The dashboard through its router: signing in (argon2 users, the session cookie's
//! attributes, login CSRF), every page's key figures, tenant scoping (another tenant's pages
//! are 404), sign-out CSRF, friendly error pages, and accessibility basics in the HTML.

use crate::scenario;
use reqwest::redirect::Policy;
use serde_json::json;
use wattledger::auth::Role;
use wattledger::dashboard::login::add_user;
use wattledger_tests::TestApp;

pub(crate) struct Browser {
    http: reqwest::Client,
    base: String,
    pub(crate) session: Option<String>,
    /// Sent as `X-Forwarded-For`, as a reverse proxy would.
    pub(crate) forwarded_for: Option<String>,
}

pub(crate) struct Page {
    pub(crate) status: u16,
    pub(crate) body: String,
    pub(crate) location: Option<String>,
    pub(crate) cookies: Vec<String>,
    pub(crate) headers: reqwest::header::HeaderMap,
}

impl Browser {
    pub(crate) fn new(app: &TestApp) -> Self {
        Browser {
            http: reqwest::Client::builder()
                .redirect(Policy::none())
                .build()
                .unwrap(),
            base: app.base.clone(),
            session: None,
            forwarded_for: None,
        }
    }

    async fn send(&self, req: reqwest::RequestBuilder, extra_cookie: Option<&str>) -> Page {
        let mut cookies: Vec<String> = Vec::new();
        if let Some(s) = &self.session {
            cookies.push(format!("wl_session={s}"));
        }
        if let Some(c) = extra_cookie {
            cookies.push(c.to_owned());
        }
        let req = if cookies.is_empty() {
            req
        } else {
            req.header("cookie", cookies.join("; "))
        };
        let req = match &self.forwarded_for {
            Some(ip) => req.header("x-forwarded-for", ip),
            None => req,
        };
        let r = req.send().await.unwrap();
        Page {
            headers: r.headers().clone(),
            status: r.status().as_u16(),
            location: r
                .headers()
                .get("location")
                .map(|v| v.to_str().unwrap().to_owned()),
            cookies: r
                .headers()
                .get_all("set-cookie")
                .iter()
                .map(|v| v.to_str().unwrap().to_owned())
                .collect(),
            body: r.text().await.unwrap(),
        }
    }

    pub(crate) async fn get(&self, path: &str) -> Page {
        self.send(self.http.get(format!("{}{path}", self.base)), None)
            .await
    }

    pub(crate) async fn post(
        &self,
        path: &str,
        form: &[(&str, &str)],
        cookie: Option<&str>,
    ) -> Page {
        self.send(
            self.http.post(format!("{}{path}", self.base)).form(form),
            cookie,
        )
        .await
    }

    /// Signs in through the form, as a browser would: fetch the form, echo its CSRF token.
    pub(crate) async fn sign_in(&mut self, user: &str, password: &str) -> Page {
        let form = self.get("/login").await;
        let csrf = hidden(&form.body, "csrf");
        let login_cookie = form
            .cookies
            .iter()
            .find(|c| c.starts_with("wl_login="))
            .unwrap();
        let login_cookie = login_cookie.split(';').next().unwrap().to_owned();
        let page = self
            .post(
                "/login",
                &[("username", user), ("password", password), ("csrf", &csrf)],
                Some(&login_cookie),
            )
            .await;
        if let Some(c) = page.cookies.iter().find(|c| c.starts_with("wl_session=")) {
            self.session = Some(
                c.trim_start_matches("wl_session=")
                    .split(';')
                    .next()
                    .unwrap()
                    .to_owned(),
            );
        }
        page
    }
}

pub(crate) fn hidden(html: &str, name: &str) -> String {
    let at = html
        .find(&format!("name=\"{name}\" value=\""))
        .expect("hidden field");
    let rest = &html[at + name.len() + 15..];
    rest[..rest.find('"').unwrap()].to_owned()
}

/// Labels on inputs, headings in order, titles on charts.
fn accessible(html: &str) {
    for input in html
        .split("<input")
        .skip(1)
        .chain(html.split("<select").skip(1))
    {
        let tag = &input[..input.find('>').unwrap()];
        if tag.contains("type=\"hidden\"") {
            continue;
        }
        let id = tag
            .split("id=\"")
            .nth(1)
            .map(|s| &s[..s.find('"').unwrap()])
            .expect("a field without an id");
        assert!(
            html.contains(&format!("<label for=\"{id}\"")),
            "input {id} has no label"
        );
    }
    let mut last = 0;
    for (i, _) in html.match_indices("<h") {
        let level = html[i + 2..].chars().next().and_then(|c| c.to_digit(10));
        if let Some(level) = level {
            assert!(level <= last + 1, "heading h{level} after h{last}");
            last = level;
        }
    }
    assert_eq!(html.matches("<h1").count(), 1, "one h1 per page");
    for svg in html.split("<svg class=\"chart\"").skip(1) {
        assert!(
            svg.starts_with(&svg[..svg.find('>').unwrap()]) && svg.contains("<title"),
            "a chart without a title"
        );
    }
}

pub(crate) async fn app_with_users() -> TestApp {
    let app = TestApp::start().await;
    let mut b = scenario::batches();
    b.sites[0]["fallback_price"] = json!("0.20");
    b.sites[0]["fallback_intensity_g"] = json!("300");
    scenario::push(&app, &b).await;
    app.attribute().await;
    for (user, role, tenant) in [
        ("ada", Role::Admin, None),
        ("fin", Role::Finance, None),
        ("alice", Role::Tenant, Some("a")),
        ("bob", Role::Tenant, Some("b")),
    ] {
        add_user(&app.pool, user, role, tenant, "correct horse battery")
            .await
            .unwrap();
    }
    app
}

#[tokio::test]
async fn signing_in_sets_a_strict_session_and_every_form_checks_csrf() {
    let app = app_with_users().await;
    let mut browser = Browser::new(&app);
    let page = browser.get("/").await;
    assert_eq!(
        (page.status, page.location.as_deref()),
        (303, Some("/login"))
    );
    let form = browser.get("/login").await;
    assert_eq!(form.status, 200);
    accessible(&form.body);
    assert!(form.cookies[0].contains("HttpOnly") && form.cookies[0].contains("SameSite=Strict"));

    // Without the form's token (another site posting the form): refused.
    let page = browser
        .post(
            "/login",
            &[
                ("username", "alice"),
                ("password", "correct horse battery"),
                ("csrf", "x"),
            ],
            None,
        )
        .await;
    assert_eq!(page.status, 403);
    assert!(page.cookies.iter().all(|c| !c.starts_with("wl_session=")));
    // A wrong password and an unknown user read the same.
    let wrong = browser.sign_in("alice", "wrong horse battery").await;
    let unknown = browser.sign_in("mallory", "correct horse battery").await;
    assert_eq!((wrong.status, unknown.status), (401, 401));
    assert!(wrong.body.contains("do not match") && unknown.body.contains("do not match"));
    assert!(browser.session.is_none());

    let page = browser.sign_in("alice", "correct horse battery").await;
    assert_eq!((page.status, page.location.as_deref()), (303, Some("/")));
    let session = page
        .cookies
        .iter()
        .find(|c| c.starts_with("wl_session="))
        .unwrap();
    for attr in ["HttpOnly", "Secure", "SameSite=Strict", "Path=/"] {
        assert!(session.contains(attr), "{attr} missing: {session}");
    }
    // The session is a random token naming a session kept by the server, not a credential
    // the API would take.
    let token = browser.session.clone().unwrap();
    assert!(token.len() == 64 && token.bytes().all(|b| b.is_ascii_hexdigit()));
    assert!(app.keys.verify(&token).is_err());
    let home = browser.get("/").await;
    assert_eq!(home.location.as_deref(), Some("/tenants/a"));

    // Signing out needs the page's token too.
    let page = browser.post("/logout", &[("csrf", "nope")], None).await;
    assert_eq!(page.status, 400);
    let overview = browser.get("/tenants/a").await;
    let csrf = hidden(&overview.body, "csrf");
    let page = browser.post("/logout", &[("csrf", &csrf)], None).await;
    assert_eq!(
        (page.status, page.location.as_deref()),
        (303, Some("/login"))
    );
    assert!(page
        .cookies
        .iter()
        .any(|c| c.starts_with("wl_session=;") && c.contains("Max-Age=0")));
    // The cookie, kept by someone who copied it, is worth nothing after sign-out.
    let page = browser.get("/tenants/a").await;
    assert_eq!(
        (page.status, page.location.as_deref()),
        (303, Some("/login"))
    );
}

#[tokio::test]
async fn a_tenant_sees_its_overview_and_nothing_of_another() {
    let app = app_with_users().await;
    let mut alice = Browser::new(&app);
    alice.sign_in("alice", "correct horse battery").await;
    let page = alice.get("/tenants/a").await;
    assert_eq!(page.status, 200, "{}", page.body);
    accessible(&page.body);
    // The scenario's a: 4.35e9 mJ = 1.2 kWh, 0.24 EUR at 0.20/kWh, 362.5 g = 0.4 kg (1 decimal).
    for figure in [
        "1.2 kWh",
        "0.24 EUR",
        "0.4 kgCO2e",
        "1,250",
        "m-endpoint",
        "job-train",
        "<svg class=\"chart\"",
    ] {
        assert!(page.body.contains(figure), "{figure} missing");
    }
    assert!(!page.body.contains("job-mig"), "b's job on a's page");
    // Tokens per kWh over the energy of the job that served them (a's share of the shared
    // endpoint), as `/v1/usage?group_by=job` answers it: not over a's training too.
    let (status, jobs) = app
        .get(
            Some(&app.tenant_token("a")),
            &format!(
                "/v1/usage?group_by=job&from={}&to={}",
                scenario::HOUR,
                scenario::NEXT_HOUR
            ),
        )
        .await;
    assert_eq!(status, 200, "{jobs}");
    let endpoint = jobs["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["job"] == "job-endpoint")
        .unwrap_or_else(|| panic!("{jobs}"));
    assert_eq!(endpoint["tokens"], 1250);
    let served_mj = endpoint["total_mj"].as_i64().unwrap();
    let grouped = |d: rust_decimal::Decimal| wattledger::dashboard::format::grouped(d, 0);
    let per_kwh = wattledger_domain::metrics::tokens_per_kwh(1250, served_mj).unwrap();
    assert_eq!(
        Some(per_kwh),
        endpoint["tokens_per_kwh"]
            .as_str()
            .map(|t| t.parse().unwrap()),
        "the page's figure is the API's for the job"
    );
    let all_energy = wattledger_domain::metrics::tokens_per_kwh(1250, 4_350_000_000).unwrap();
    assert_ne!(grouped(per_kwh), grouped(all_energy));
    assert!(
        page.body.contains(&format!(
            "{} per kWh of the inference jobs that served them",
            grouped(per_kwh)
        )),
        "{}",
        page.body
    );
    // Another tenant's page, the tenant index and finance: not found, as a page that is not.
    for path in [
        "/tenants/b",
        "/tenants/nobody",
        "/finance",
        "/finance/2026-09",
    ] {
        let page = alice.get(path).await;
        assert_eq!(page.status, 404, "{path}");
        assert!(page.body.contains("There is no such page"));
        assert!(!page.body.contains("Tenant B"));
    }

    // Its jobs, and its share of the shared endpoint; not b's notebook.
    let job = alice.get("/jobs/job-train").await;
    assert_eq!(job.status, 200, "{}", job.body);
    accessible(&job.body);
    for figure in [
        "GPU-0",
        "Node overhead",
        "Facility overhead",
        "Power by hour",
        "<svg class=\"chart\"",
    ] {
        assert!(job.body.contains(figure), "{figure} missing");
    }
    let endpoint = alice.get("/jobs/job-endpoint").await;
    assert_eq!(endpoint.status, 200);
    assert!(
        endpoint.body.contains("1,250"),
        "a's 1,000 + 250 tokens only: {}",
        endpoint.body
    );
    for path in ["/jobs/job-mig", "/jobs/nothing", "/operator"] {
        assert_eq!(alice.get(path).await.status, 404, "{path}");
    }

    let mut ada = Browser::new(&app);
    ada.sign_in("ada", "correct horse battery").await;
    let ops = ada.get("/operator").await;
    assert_eq!(ops.status, 200, "{}", ops.body);
    accessible(&ops.body);
    for figure in [
        "Site 1",
        "100 kW envelope",
        "PUE",
        "g1-mig0",
        "class=\"depth-1\">g0",
        "class=\"depth-2\">g1-mig0",
    ] {
        assert!(ops.body.contains(figure), "{figure} missing");
    }
    // Every table sorts by its headings, keeping the page's other parameters.
    for (path, sorted) in [
        (
            "/operator?from=2026-11-01&to=2026-11-05&dsort=pue.asc",
            "href=\"?from=2026-11-01&#38;to=2026-11-05&#38;dsort=pue.desc\"",
        ),
        ("/operator?msort=gaps.desc", "href=\"?from="),
        ("/jobs/job-train?sort=kw.desc", "href=\"?sort=kw.asc\""),
        (
            "/tenants/a?from=2026-11-01&to=2026-11-05&dsort=total.desc",
            "href=\"?from=2026-11-01&#38;to=2026-11-05&#38;dsort=total.asc\"",
        ),
        ("/admin/users?sort=role.asc", "href=\"?sort=role.desc\""),
    ] {
        let page = ada.get(path).await;
        assert_eq!(page.status, 200, "{path}");
        assert!(
            page.body.contains(sorted),
            "{path}: {sorted} missing in {}",
            page.body
                .lines()
                .filter(|l| l.contains("aria-sort"))
                .collect::<Vec<_>>()
                .join("\n")
        );
        assert!(
            page.body.contains("<details open>") || path.starts_with("/admin"),
            "{path}: the sorted table is shown"
        );
    }
    // The scenario's day, picked by range: its PUE is the site's static 1.25.
    let nov2 = ada.get("/operator?from=2026-11-01&to=2026-11-05").await;
    assert_eq!(nov2.status, 200);
    assert!(
        nov2.body.contains("Mon Nov 2") && nov2.body.contains(">1.250<"),
        "{}",
        nov2.body
    );
    let index = ada.get("/").await;
    assert_eq!(index.status, 200);
    assert!(index.body.contains("href=\"/tenants/a?") && index.body.contains("href=\"/tenants/b?"));
    let b = ada.get("/tenants/b").await;
    assert_eq!(b.status, 200);
    assert!(b.body.contains("job-mig") && !b.body.contains("job-train"));
    // Sorted by a heading's link, and over another range (nothing there), or a bad one.
    let sorted = ada.get("/?sort=tenant.asc").await;
    assert!(sorted
        .body
        .contains("aria-sort=\"ascending\"><a href=\"?from="));
    let (pa, pb) = (
        sorted.body.find("/tenants/a?").unwrap(),
        sorted.body.find("/tenants/b?").unwrap(),
    );
    assert!(pa < pb, "a before b by name");
    assert!(sorted
        .body
        .contains("aria-sort=\"ascending\"><a href=\"?from="));
    let sorted = ada.get("/?sort=tenant.desc").await;
    assert!(sorted.body.find("/tenants/b?").unwrap() < sorted.body.find("/tenants/a?").unwrap());
    let october = ada.get("/tenants/a?from=2026-10-01&to=2026-10-31").await;
    assert_eq!(october.status, 200);
    assert!(
        october
            .body
            .contains("No energy attributed to a in this range")
            && october.body.contains("Oct 1 – Oct 31, 2026")
    );
    let backwards = ada.get("/tenants/a?from=2026-10-31&to=2026-10-01").await;
    assert_eq!(backwards.status, 400);
    assert!(backwards.body.contains("The range starts after it ends"));
    // Without a session, a page sends to the login; a bad cookie too.
    let mut anon = Browser::new(&app);
    anon.session = Some("not-a-token".into());
    assert_eq!(
        anon.get("/tenants/a").await.location.as_deref(),
        Some("/login")
    );
}

#[tokio::test]
async fn finance_sees_the_months_the_chargeback_and_downloads_the_exports() {
    let app = TestApp::start().await;
    let mut b = scenario::batches_at("2026-09-15T10:00:00Z");
    b.sites[0]["fallback_price"] = json!("0.20");
    b.sites[0]["fallback_intensity_g"] = json!("300");
    scenario::push(&app, &b).await;
    app.attribute().await;
    add_user(
        &app.pool,
        "fin",
        Role::Finance,
        None,
        "correct horse battery",
    )
    .await
    .unwrap();
    add_user(
        &app.pool,
        "olga",
        Role::Operator,
        None,
        "correct horse battery",
    )
    .await
    .unwrap();
    let mut fin = Browser::new(&app);
    fin.sign_in("fin", "correct horse battery").await;
    let months = fin.get("/finance").await;
    assert_eq!(months.status, 200);
    accessible(&months.body);
    assert!(months.body.contains("2026-09") && months.body.contains("Open"));

    let (status, _) = app
        .post_raw(
            &app.token(Role::Finance),
            "/v1/chargeback/months/2026-09/close",
            String::new(),
        )
        .await;
    assert_eq!(status, 201);
    let months = fin.get("/finance").await;
    assert!(months.body.contains("href=\"/finance/2026-09\"") && months.body.contains("Closed v1"));
    let month = fin.get("/finance/2026-09").await;
    assert_eq!(month.status, 200);
    accessible(&month.body);
    for figure in [
        "WL-2026-09-a-EUR-v1",
        "0.24 EUR",
        "0.12 EUR",
        "0.40 EUR",
        "to the mJ",
        "FOCUS 1.2 CSV",
        "href=\"/finance/2026-09/exports/prices\"",
    ] {
        assert!(month.body.contains(figure), "{figure} missing");
    }
    for (path, sorted) in [
        ("/finance?sort=metered.desc", "href=\"?sort=metered.asc\""),
        (
            "/finance/2026-09?rsort=metered.desc&sort=billed.asc",
            "href=\"?sort=billed.asc&#38;rsort=metered.asc\"",
        ),
    ] {
        let page = fin.get(path).await;
        assert_eq!(page.status, 200, "{path}");
        assert!(
            page.body.contains(sorted),
            "{path}: {sorted} missing in {}",
            page.body
                .lines()
                .filter(|l| l.contains("aria-sort"))
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
    // Statements sorted by what they bill: a (0.24) before b (0.12), and back.
    let by_billed = fin.get("/finance/2026-09?sort=billed.desc").await;
    assert!(
        by_billed.body.find("WL-2026-09-a-EUR-v1").unwrap()
            < by_billed.body.find("WL-2026-09-b-EUR-v1").unwrap()
    );
    let by_billed = fin.get("/finance/2026-09?sort=billed.asc").await;
    assert!(
        by_billed.body.find("WL-2026-09-b-EUR-v1").unwrap()
            < by_billed.body.find("WL-2026-09-a-EUR-v1").unwrap()
    );
    let download = fin.get("/finance/2026-09/exports/focus").await;
    assert_eq!(download.status, 200);
    let r = app
        .http
        .get(format!(
            "{}/v1/chargeback/months/2026-09/exports/focus",
            app.base
        ))
        .bearer_auth(app.token(Role::Finance))
        .send()
        .await
        .unwrap();
    assert_eq!(
        download.body,
        r.text().await.unwrap(),
        "the same bytes as the API's"
    );
    assert_eq!(
        fin.get("/finance/2026-10").await.status,
        404,
        "an open month has no statements"
    );
    assert_eq!(fin.get("/finance/nonsense").await.status, 404);

    // An operator is told the page is not for its role.
    let mut olga = Browser::new(&app);
    olga.sign_in("olga", "correct horse battery").await;
    let page = olga.get("/finance").await;
    assert_eq!(page.status, 403);
    assert!(page.body.contains("Your role cannot open this page"));
}

#[tokio::test]
async fn an_admin_adds_users_and_the_overview_shows_deferred_savings() {
    let app = app_with_users().await;
    let mut ada = Browser::new(&app);
    ada.sign_in("ada", "correct horse battery").await;
    let page = ada.get("/admin/users").await;
    assert_eq!(page.status, 200);
    accessible(&page.body);
    assert!(page.body.contains("alice") && page.body.contains("<option value=\"a\">"));
    let csrf = hidden(&page.body, "csrf");
    // A generated password, shown once, that signs in.
    let saved = ada
        .post(
            "/admin/users",
            &[
                ("csrf", &csrf),
                ("username", "Carol"),
                ("role", "tenant"),
                ("tenant", "b"),
                ("password", ""),
            ],
            None,
        )
        .await;
    assert_eq!(saved.status, 200, "{}", saved.body);
    let notice = saved.body.split("shown this once: ").nth(1).unwrap();
    let password = &notice[..notice.find('<').unwrap()];
    let mut carol = Browser::new(&app);
    assert_eq!(
        carol.sign_in("carol", password).await.location.as_deref(),
        Some("/")
    );
    assert_eq!(carol.get("/").await.location.as_deref(), Some("/tenants/b"));
    // Refusals name the problem; without the token nothing is saved.
    let bad = ada
        .post(
            "/admin/users",
            &[
                ("csrf", &csrf),
                ("username", "dave"),
                ("role", "tenant"),
                ("tenant", ""),
                ("password", ""),
            ],
            None,
        )
        .await;
    assert_eq!(bad.status, 422);
    assert!(
        bad.body.contains("--tenant is required") || bad.body.contains("tenant"),
        "{}",
        bad.body
    );
    let short = ada
        .post(
            "/admin/users",
            &[
                ("csrf", &csrf),
                ("username", "erin"),
                ("role", "finance"),
                ("password", "short"),
            ],
            None,
        )
        .await;
    assert_eq!(short.status, 422);
    assert!(short.body.contains("at least 12 characters"));
    let forged = ada
        .post(
            "/admin/users",
            &[
                ("csrf", "forged"),
                ("username", "mallory"),
                ("role", "admin"),
                ("password", ""),
            ],
            None,
        )
        .await;
    assert_eq!(forged.status, 400);
    let (n,): (i64,) =
        sqlx::query_as("SELECT count(*) FROM users WHERE username IN ('dave', 'erin', 'mallory')")
            .fetch_one(&app.pool)
            .await
            .unwrap();
    assert_eq!(n, 0);
    let mut alice = Browser::new(&app);
    alice.sign_in("alice", "correct horse battery").await;
    assert_eq!(alice.get("/admin/users").await.status, 404);
    let mut fin = Browser::new(&app);
    fin.sign_in("fin", "correct horse battery").await;
    assert_eq!(fin.get("/admin/users").await.status, 403);

    // A job of a's deferred by admission this month, with what it was estimated to save.
    let before = alice.get("/tenants/a").await;
    assert!(before.body.contains("No job was deferred in this range"));
    sqlx::query(
        "INSERT INTO admission_decisions (id, decided_at, tenant_id, source, kind, priority, gpus,
             decision, site_id, start_at, end_at, request, answer, est_currency)
         SELECT gen_random_uuid(), now(), t.id, 'slurm', 'training', 'normal', 8, 'defer', s.id,
                now() + interval '3 hours', now() + interval '9 hours', '{}',
                '{\"savings\": {\"carbon_marginal_kg\": \"12.5\", \"carbon_average_kg\": \"4.25\", \"cost\": \"3.10\"}}',
                'EUR'
         FROM tenants t, sites s WHERE t.key = 'a' AND s.key = 's1'",
    )
    .execute(&app.pool)
    .await
    .unwrap();
    let after = alice.get("/tenants/a").await;
    assert!(
        after.body.contains("1 jobs were deferred"),
        "{}",
        after.body
    );
    assert!(
        after.body.contains("12.5 kgCO2e marginal (4.3 average)")
            && after.body.contains("3.10 EUR"),
        "{}",
        after.body
    );
    let b = ada.get("/tenants/b").await;
    assert!(
        b.body.contains("No job was deferred in this range"),
        "a's deferral is not b's"
    );

    // One job moved out of a demand-response event, one that only waited for headroom: each
    // says why it was deferred and what it saved in its unit, never a saving of 0.0 and a dash.
    sqlx::query(
        "INSERT INTO grid_events (key, site_id, starts_at, ends_at, reduction_w, price_per_kwh,
             baseline_method, created_by)
         SELECT 'dr-1', s.id, date_trunc('hour', now()) + interval '2 hours',
                date_trunc('hour', now()) + interval '4 hours', 50000, 0.5, 'weekdays-10', 'test'
         FROM sites s WHERE s.key = 's1'",
    )
    .execute(&app.pool)
    .await
    .unwrap();
    sqlx::query(
        "INSERT INTO admission_decisions (id, decided_at, tenant_id, source, kind, priority, gpus,
             decision, site_id, start_at, end_at, request, answer, est_currency, grid_event_id,
             moved_mj)
         SELECT gen_random_uuid(), now(), t.id, 'slurm', 'batch', 'normal', 8, 'defer', s.id,
                now() + interval '5 hours', now() + interval '6 hours', '{}',
                '{\"savings\": {\"carbon_marginal_kg\": \"0\", \"cost\": \"0\"}}', 'EUR',
                e.id, 7200000000
         FROM tenants t, sites s, grid_events e WHERE t.key = 'a' AND s.key = 's1' AND e.key = 'dr-1'",
    )
    .execute(&app.pool)
    .await
    .unwrap();
    sqlx::query(
        "INSERT INTO admission_decisions (id, decided_at, tenant_id, source, kind, priority, gpus,
             decision, site_id, start_at, end_at, request, answer, est_currency)
         SELECT gen_random_uuid(), now(), t.id, 'kubernetes', 'training', 'normal', 8, 'defer',
                s.id, now() + interval '1 hour', now() + interval '9 hours', '{}',
                '{\"savings\": {\"carbon_marginal_kg\": \"-0.2\", \"cost\": \"0\"}}', 'EUR'
         FROM tenants t, sites s WHERE t.key = 'a' AND s.key = 's1'",
    )
    .execute(&app.pool)
    .await
    .unwrap();
    let page = alice.get("/tenants/a").await;
    for said in [
        "3 jobs were deferred in this range",
        "1 moved out of grid event dr-1 (demand response at s1, ",
        "2.0 kWh moved out of its window; its credit is known once the event is measured",
        "1 deferred to cleaner and cheaper hours, saving an estimated 12.5 kgCO2e marginal (4.3 average) and 3.10 EUR",
        "1 waited for power headroom at their site: no carbon or money saving is estimated for it",
    ] {
        assert!(page.body.contains(said), "{said} not in {}", page.body);
    }
    assert!(!page.body.contains("0.0 kgCO2e marginal"), "{}", page.body);
}
