//! HTTPS beside plain HTTP, as the Kubernetes API server calls the admission webhook: a
//! private CA is trusted and nothing else, the stored AdmissionReview is answered over TLS,
//! failed handshakes (untrusting clients, plain HTTP, a stalled handshake) disturb no one,
//! a rotated key pair is served without a restart (a half-rotated one is not), and a missing
//! key file stops the server at start.

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use wattledger::auth::{Keys, Role};
use wattledger::config::{Config, WebhookAuth};
use wattledger::startup::{self, Listeners};
use wattledger_tests::{fresh_db, SECRET};

/// A throwaway certificate authority.
struct Ca {
    pem: String,
    issuer: Issuer<'static, KeyPair>,
}

/// A server certificate and its key, as cert-manager's Secret holds them.
struct Leaf {
    cert_pem: String,
    key_pem: String,
    der: Vec<u8>,
}

impl Ca {
    fn new(name: &str) -> Self {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let pem = params.self_signed(&key).unwrap().pem();
        Ca {
            pem,
            issuer: Issuer::new(params, key),
        }
    }

    /// A certificate for 127.0.0.1 and the service name `dns` (its own key, so its own
    /// serial number).
    fn leaf(&self, dns: &str) -> Leaf {
        let key = KeyPair::generate().unwrap();
        let params = CertificateParams::new(vec!["127.0.0.1".to_owned(), dns.to_owned()]).unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        Leaf {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
            der: cert.der().to_vec(),
        }
    }
}

/// The server with an HTTPS listener on port 0, its pair in files under a fresh folder.
struct TlsApp {
    http: SocketAddr,
    https: SocketAddr,
    dir: PathBuf,
    keys: Keys,
    _stop: tokio::sync::oneshot::Sender<()>,
}

impl TlsApp {
    async fn start(leaf: &Leaf, reload_ms: u64) -> Self {
        Self::start_with(leaf, reload_ms, WebhookAuth::Token).await
    }

    async fn start_with(leaf: &Leaf, reload_ms: u64, webhook_auth: WebhookAuth) -> Self {
        let dir = temp_dir();
        write(&dir.join("tls.crt"), &leaf.cert_pem);
        write(&dir.join("tls.key"), &leaf.key_pem);
        let (pool, db_url) = fresh_db().await;
        let mut config = Config::for_tests(db_url, SECRET.into());
        config.tls_listen = Some("127.0.0.1:0".parse().unwrap());
        config.tls_cert_file = Some(dir.join("tls.crt"));
        config.tls_key_file = Some(dir.join("tls.key"));
        config.tls_reload_ms = reload_ms;
        config.webhook_auth = webhook_auth;
        let listeners = Listeners::bind(&config).await.unwrap();
        let http = listeners.http.local_addr().unwrap();
        let https = listeners.https.as_ref().unwrap().0.local_addr().unwrap();
        let keys = Keys::new(SECRET.as_bytes()).unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(startup::serve(
            pool,
            keys.clone(),
            config,
            listeners,
            async {
                let _ = stopped.await;
            },
        ));
        TlsApp {
            http,
            https,
            dir,
            keys,
            _stop: stop,
        }
    }

    fn url(&self, path: &str) -> String {
        format!("https://{}{path}", self.https)
    }
}

impl Drop for TlsApp {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn temp_dir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("wattledger-tls-{}", uuid::Uuid::now_v7()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Replaces `path` whole (a new file renamed over it), as the kubelet swaps a Secret's files.
fn write(path: &Path, text: &str) {
    let tmp = path.with_extension("new");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

/// A client that trusts `ca` and nothing else, on a new connection every time. (A new client
/// also has no TLS session to resume: a resumed handshake carries no certificate.)
fn client(ca: &Ca) -> reqwest::Client {
    reqwest::Client::builder()
        .use_rustls_tls()
        .tls_built_in_root_certs(false)
        .add_root_certificate(reqwest::Certificate::from_pem(ca.pem.as_bytes()).unwrap())
        .tls_info(true)
        .pool_max_idle_per_host(0)
        .build()
        .unwrap()
}

/// The leaf certificate the server presented for `response`.
fn served(response: &reqwest::Response) -> Vec<u8> {
    response
        .extensions()
        .get::<reqwest::tls::TlsInfo>()
        .and_then(|info| info.peer_certificate())
        .expect("a TLS response carries the server's certificate")
        .to_vec()
}

async fn health(client: &reqwest::Client, app: &TlsApp) -> reqwest::Response {
    let r = client.get(app.url("/health")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    r
}

#[tokio::test]
async fn the_api_and_the_admission_webhook_answer_over_https() {
    let ca = Ca::new("wattledger test CA");
    let leaf = ca.leaf("wattledger.wattledger.svc");
    let app = TlsApp::start(&leaf, 30_000).await;
    let https = client(&ca);

    let r = health(&https, &app).await;
    assert_eq!(served(&r), leaf.der);

    // The stored AdmissionReview (a pod without GPUs), as the API server posts it.
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../shared/fixtures/kubernetes/admissionreview-v1-pod-create-request.json");
    let review = std::fs::read_to_string(path).unwrap();
    let uid = serde_json::from_str::<Value>(&review).unwrap()["request"]["uid"].clone();
    let scheduler = app.keys.mint("test", Role::Scheduler, None, 600).unwrap();
    let mut answer = None;
    for _ in 0..100 {
        let r = https
            .post(app.url("/v1/admission/kubernetes"))
            .bearer_auth(&scheduler)
            .header("content-type", "application/json")
            .body(review.clone())
            .send()
            .await
            .unwrap();
        // 503 until admission has loaded its state once.
        if r.status() != 503 {
            assert_eq!(r.status(), 200);
            answer = Some(r.json::<Value>().await.unwrap());
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let answer = answer.expect("the webhook answered");
    assert_eq!(answer["kind"], "AdmissionReview");
    assert_eq!(answer["response"]["uid"], uid);
    assert_eq!(answer["response"]["allowed"], true, "{answer}");

    // Without a token the webhook over TLS still checks who calls.
    let r = https
        .post(app.url("/v1/admission/kubernetes"))
        .header("content-type", "application/json")
        .body(review)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);

    // The plain listener serves the same router.
    let r = reqwest::get(format!("http://{}/health", app.http))
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
}

/// Posts the stored AdmissionReview of a GPU pod to `url`, with `token` if given, retrying
/// while admission has not loaded its state (503); the status and body.
async fn review_gpu_pod(
    client: &reqwest::Client,
    url: &str,
    token: Option<&str>,
) -> (reqwest::StatusCode, Value) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../shared/fixtures/kubernetes/admissionreview-v1-pod-create-request.json");
    let mut review: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    review["request"]["object"]["spec"]["containers"][0]["resources"] =
        json!({"requests": {"amd.com/gpu": 1}});
    for _ in 0..100 {
        let mut r = client.post(url).json(&review);
        if let Some(token) = token {
            r = r.bearer_auth(token);
        }
        let r = r.send().await.unwrap();
        if r.status() != 503 {
            let status = r.status();
            return (status, r.json().await.unwrap_or(Value::Null));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("admission never loaded its state");
}

#[tokio::test]
async fn an_open_webhook_answers_the_api_server_without_a_token_on_the_tls_listener_only() {
    let ca = Ca::new("wattledger test CA");
    let leaf = ca.leaf("wattledger.wattledger.svc");
    let app = TlsApp::start_with(&leaf, 30_000, WebhookAuth::Open).await;
    let https = client(&ca);
    let webhook = app.url("/v1/admission/kubernetes");

    // The API server of a managed cluster: TLS, no token. The pod asks for an AMD GPU by
    // request only, and is decided (a decision's id in its audit annotations).
    let (status, answer) = review_gpu_pod(&https, &webhook, None).await;
    assert_eq!(status, 200, "{answer}");
    assert!(
        answer["response"]["auditAnnotations"]["wattledger.io/decision"].is_string()
            || answer["response"]["status"]["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("wattledger")),
        "the GPU pod was put to the policy: {answer}"
    );

    // Nothing else opens: the same path on the plain listener, another path over TLS.
    let plain = format!("http://{}/v1/admission/kubernetes", app.http);
    let (status, _) = review_gpu_pod(&reqwest::Client::new(), &plain, None).await;
    assert_eq!(status, 401);
    let r = https.get(app.url("/v1/usage")).send().await.unwrap();
    assert_eq!(r.status(), 401);
    let r = https
        .post(app.url("/v1/admission"))
        .json(&json!({"tenant": "t", "gpus": 1, "duration_s": 60}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);

    // A token that is sent is still checked: a forged one is refused, a tenant's forbidden.
    let (status, _) = review_gpu_pod(&https, &webhook, Some("not-a-token")).await;
    assert_eq!(status, 401);
    let tenant = app.keys.mint("test", Role::Tenant, Some("t"), 600).unwrap();
    let (status, _) = review_gpu_pod(&https, &webhook, Some(&tenant)).await;
    assert!(status == 401 || status == 403, "{status}");
}

#[tokio::test]
async fn failed_handshakes_disturb_no_one() {
    let ca = Ca::new("wattledger test CA");
    let app = TlsApp::start(&ca.leaf("wattledger.wattledger.svc"), 30_000).await;
    let https = client(&ca);

    // A handshake that stalls after a few bytes is closed at the deadline, not held open.
    let started = Instant::now();
    let mut stalled = TcpStream::connect(app.https).await.unwrap();
    stalled.write_all(&[0x16, 0x03, 0x01]).await.unwrap();

    // A client trusting another CA is refused: the certificate is not one it knows.
    let stranger = client(&Ca::new("someone else"));
    let err = stranger
        .get(app.url("/health"))
        .send()
        .await
        .expect_err("an untrusted certificate");
    assert!(err.is_connect(), "{err:?}");
    assert!(format!("{err:?}").contains("UnknownIssuer"), "{err:?}");

    // Plain HTTP on the HTTPS port gets no HTTP answer, and the connection is closed.
    let mut plain = TcpStream::connect(app.https).await.unwrap();
    plain
        .write_all(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        .await
        .unwrap();
    let mut reply = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), plain.read_to_end(&mut reply))
        .await
        .expect("the server closes the connection")
        .ok();
    assert!(!reply.starts_with(b"HTTP/"), "{reply:?}");

    // Meanwhile a trusting client is served.
    health(&https, &app).await;

    let mut rest = Vec::new();
    tokio::time::timeout(Duration::from_secs(15), stalled.read_to_end(&mut rest))
        .await
        .expect("the stalled handshake is dropped at the deadline")
        .ok();
    let held = started.elapsed();
    assert!(held >= Duration::from_secs(9), "closed after {held:?}");
    assert!(!rest.starts_with(b"HTTP/"), "{rest:?}");
    health(&https, &app).await;
}

#[tokio::test]
async fn a_rotated_key_pair_is_served_without_a_restart() {
    let ca = Ca::new("wattledger test CA");
    let old = ca.leaf("wattledger.wattledger.svc");
    let app = TlsApp::start(&old, 100).await;
    assert_eq!(served(&health(&client(&ca), &app).await), old.der);

    // Caught half rotated: the new certificate beside the old key. Refused; the old pair
    // is still served, several reload intervals later.
    let new = ca.leaf("wattledger-webhook.wattledger.svc");
    assert_ne!(new.der, old.der);
    write(&app.dir.join("tls.crt"), &new.cert_pem);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(served(&health(&client(&ca), &app).await), old.der);

    // The key follows: new connections get the new certificate.
    write(&app.dir.join("tls.key"), &new.key_pem);
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        if served(&health(&client(&ca), &app).await) == new.der {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the new certificate was not served"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // Files gone for a moment (a Secret being recreated): the last good pair stays.
    std::fs::remove_file(app.dir.join("tls.key")).unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(served(&health(&client(&ca), &app).await), new.der);
}

#[tokio::test]
async fn a_missing_key_file_stops_the_server_at_start() {
    let ca = Ca::new("wattledger test CA");
    let leaf = ca.leaf("wattledger.wattledger.svc");
    let dir = temp_dir();
    write(&dir.join("tls.crt"), &leaf.cert_pem);
    let mut config = Config::for_tests("postgres://unused".into(), SECRET.into());
    config.tls_listen = Some("127.0.0.1:0".parse().unwrap());
    config.tls_cert_file = Some(dir.join("tls.crt"));

    // The key file not named at all.
    let err = Listeners::bind(&config).await.err().expect("refused");
    assert!(err.to_string().contains("--tls-key-file"), "{err}");

    // Named but not there: refused before anything is served, naming the file.
    let missing = dir.join("tls.key");
    config.tls_key_file = Some(missing.clone());
    let err = format!(
        "{:#}",
        Listeners::bind(&config).await.err().expect("refused")
    );
    assert!(err.contains("loading the TLS key pair"), "{err}");
    assert!(err.contains(&missing.display().to_string()), "{err}");

    // A key that is not the certificate's.
    let other = ca.leaf("wattledger.wattledger.svc");
    write(&missing, &other.key_pem);
    let err = format!(
        "{:#}",
        Listeners::bind(&config).await.err().expect("refused")
    );
    assert!(err.contains("does not fit the certificate"), "{err}");

    // The right key: bound.
    write(&missing, &leaf.key_pem);
    assert!(Listeners::bind(&config).await.unwrap().https.is_some());
    let _ = std::fs::remove_dir_all(dir);
}
