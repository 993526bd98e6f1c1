//! The web console: the built files of `console/` (a React app that calls
//! the same services through gRPC-Web) served on the gRPC listener itself.
//!
//! [`ConsoleLayer`] is the outermost layer of the server: a `GET` or `HEAD`
//! (gRPC and gRPC-Web calls are always `POST`) is answered here from the
//! files embedded at build time, before the leader gate and auth — the files
//! hold no tenant data; every byte of data the page shows comes through the
//! API under the caller's token. Paths without an extension are the app's
//! own URLs (`/`, `/trainings/<id>`, ...) and get `index.html`, so a person
//! can bookmark and share them. A coordinator built before the console was
//! built answers them with a page that says how to build it.
//!
//! Release builds embed the files; debug builds (the tests') read them from
//! `console/dist` at run time, as rust-embed does.

use http::{header, HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::Full;
use std::borrow::Cow;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use tonic::codegen::Bytes;
use tower::{Layer, Service};

#[derive(rust_embed::RustEmbed)]
#[folder = "../../console/dist"]
#[allow_missing = true]
struct Assets;

type Body = tonic::body::Body;
type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// The page a coordinator built without the console answers with.
const NOT_BUILT: &str = "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
<title>cohort</title></head><body style=\"font-family:sans-serif;max-width:40em;margin:3em auto\">\
<h1>cohort</h1><p>This coordinator was built without its web console. Build the console \
and then the coordinator:</p><pre>npm --prefix console ci\nnpm --prefix console run build\n\
cargo build --release -p cohort-coordinator</pre><p>(<code>./scripts/setup.sh</code> does the first \
two.) The gRPC API on this port works without it.</p></body></html>";

/// Content security: scripts, styles and calls from this origin only.
const CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; \
img-src 'self' data: blob:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; \
form-action 'self'";

/// Whether the console's files are there (embedded, or on disk in debug).
pub fn built() -> bool {
    Assets::get("index.html").is_some()
}

#[derive(Clone, Default)]
pub struct ConsoleLayer;

impl<S> Layer<S> for ConsoleLayer {
    type Service = Console<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Console { inner }
    }
}

#[derive(Clone)]
pub struct Console<S> {
    inner: S,
}

impl<S> Service<Request<Body>> for Console<S>
where
    S: Service<Request<Body>, Response = Response<Body>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
{
    type Response = Response<Body>;
    type Error = S::Error;
    type Future = BoxFuture<Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<Body>) -> Self::Future {
        if !is_page_request(&request) {
            let clone = self.inner.clone();
            let mut inner = std::mem::replace(&mut self.inner, clone);
            return Box::pin(async move { inner.call(request).await });
        }
        let response = answer(&request);
        Box::pin(async move { Ok(response) })
    }
}

/// A browser's page or file request: GET/HEAD, not a gRPC call.
fn is_page_request<B>(request: &Request<B>) -> bool {
    let method = request.method();
    if method != Method::GET && method != Method::HEAD {
        return false;
    }
    !request
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ct| ct.starts_with("application/grpc"))
}

/// What a path names: one of the app's pages or one of its files.
#[derive(Debug, PartialEq)]
enum Target<'a> {
    Page,
    File(&'a str),
    Invalid,
}

fn target(path: &str) -> Target<'_> {
    let relative = path.trim_start_matches('/');
    if relative.is_empty() {
        return Target::Page;
    }
    let safe = relative
        .split('/')
        .all(|seg| !seg.is_empty() && seg != "." && seg != ".." && !seg.contains('\\'));
    if !safe {
        return Target::Invalid;
    }
    let last = relative.rsplit('/').next().unwrap_or(relative);
    if last.contains('.') {
        Target::File(relative)
    } else {
        Target::Page
    }
}

fn answer<B>(request: &Request<B>) -> Response<Body> {
    let head = request.method() == Method::HEAD;
    let gzip_ok = request
        .headers()
        .get(header::ACCEPT_ENCODING)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|e| e.trim().starts_with("gzip")));
    let name = match target(request.uri().path()) {
        Target::Page => "index.html",
        Target::File(name) => name,
        Target::Invalid => return page(StatusCode::NOT_FOUND, "not found\n", head),
    };
    // Each file is looked up once: its .gz when the browser takes gzip, else itself.
    let compressed = gzip_ok
        .then(|| Assets::get(&format!("{name}.gz")))
        .flatten()
        .map(|file| (file, Some("gzip")));
    let (file, encoding) = match compressed.or_else(|| Assets::get(name).map(|file| (file, None))) {
        Some(found) => found,
        None if name == "index.html" => return page(StatusCode::OK, NOT_BUILT, head),
        None => return page(StatusCode::NOT_FOUND, "not found\n", head),
    };
    let mut builder = Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, content_type(name))
        .header(header::CACHE_CONTROL, cache_control(name))
        .header(header::VARY, "accept-encoding")
        .header(header::CONTENT_LENGTH, file.data.len());
    if let Some(encoding) = encoding {
        builder = builder.header(header::CONTENT_ENCODING, encoding);
    }
    let body = if head { Bytes::new() } else { bytes(file.data) };
    finish(builder, body)
}

fn page(status: StatusCode, html: &'static str, head: bool) -> Response<Body> {
    let content_type = if html.starts_with('<') {
        "text/html; charset=utf-8"
    } else {
        "text/plain; charset=utf-8"
    };
    let builder = Response::builder()
        .status(status)
        .header(header::CONTENT_TYPE, content_type)
        .header(header::CACHE_CONTROL, "no-cache")
        .header(header::CONTENT_LENGTH, html.len());
    let body = if head {
        Bytes::new()
    } else {
        Bytes::from_static(html.as_bytes())
    };
    finish(builder, body)
}

fn finish(builder: http::response::Builder, body: Bytes) -> Response<Body> {
    let mut response = builder
        .body(Body::new(Full::new(body)))
        .unwrap_or_else(|_| Response::new(Body::empty()));
    let headers = response.headers_mut();
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    response
}

fn bytes(data: Cow<'static, [u8]>) -> Bytes {
    match data {
        Cow::Borrowed(b) => Bytes::from_static(b),
        Cow::Owned(v) => Bytes::from(v),
    }
}

fn content_type(name: &str) -> &'static str {
    match name.rsplit('.').next().unwrap_or("") {
        "html" => "text/html; charset=utf-8",
        "js" | "mjs" => "text/javascript; charset=utf-8",
        "css" => "text/css; charset=utf-8",
        "svg" => "image/svg+xml",
        "png" => "image/png",
        "ico" => "image/x-icon",
        "json" | "map" => "application/json",
        "woff2" => "font/woff2",
        "txt" => "text/plain; charset=utf-8",
        _ => "application/octet-stream",
    }
}

/// Vite names every built asset by its content hash: cached for good; the
/// page itself is revalidated so a new coordinator's console loads at once.
fn cache_control(name: &str) -> &'static str {
    if name.starts_with("assets/") {
        "public, max-age=31536000, immutable"
    } else {
        "no-cache"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn app_urls_are_pages_and_files_are_files() {
        assert_eq!(target("/"), Target::Page);
        assert_eq!(target("/trainings/abc-1"), Target::Page);
        assert_eq!(target("/new"), Target::Page);
        assert_eq!(
            target("/assets/index-1a2b.js"),
            Target::File("assets/index-1a2b.js")
        );
        assert_eq!(target("/favicon.svg"), Target::File("favicon.svg"));
    }

    #[test]
    fn paths_that_climb_or_hide_are_refused() {
        assert_eq!(target("/assets/../../Cargo.toml"), Target::Invalid);
        assert_eq!(target("/assets//x.js"), Target::Invalid);
        assert_eq!(target("/./index.html"), Target::Invalid);
        assert_eq!(target("/a\\..\\b.js"), Target::Invalid);
    }

    #[test]
    fn grpc_calls_pass_and_browser_gets_are_answered() {
        let get = Request::get("/trainings").body(()).unwrap();
        assert!(is_page_request(&get));
        let grpc = Request::post("/cohort.v1.TrainingService/ListTrainings")
            .header(header::CONTENT_TYPE, "application/grpc-web+proto")
            .body(())
            .unwrap();
        assert!(!is_page_request(&grpc));
        let odd = Request::get("/x")
            .header(header::CONTENT_TYPE, "application/grpc")
            .body(())
            .unwrap();
        assert!(!is_page_request(&odd));
    }

    #[test]
    fn hashed_assets_are_immutable_and_pages_revalidate() {
        assert_eq!(cache_control("index.html"), "no-cache");
        assert!(cache_control("assets/a-1.js").contains("immutable"));
        assert_eq!(
            content_type("assets/a.js"),
            "text/javascript; charset=utf-8"
        );
    }
}
