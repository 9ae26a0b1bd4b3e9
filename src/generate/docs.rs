//! The documentation fetcher: the first stage of generating a server from a prompt.
//!
//! The prompt's http(s) URLs ([`extract_urls`]) are fetched through the egress
//! ([`Egress::fetch_document`]: any host, but every other egress rule — address vetting,
//! `[egress.resolve]`, redirects re-checked hop by hop, a byte cap, a deadline), at most
//! [`CONCURRENCY`] at a time, and turned into text for the planner:
//!
//! * GitHub repository, tree and blob URLs are fetched from `raw.githubusercontent.com` instead
//!   ([`rewrite_github`]): the rendered page buries the README in UI chrome. If the raw file is
//!   missing (a `readme.md`, a README elsewhere) the original page is fetched instead.
//! * HTML (`text/html`, `application/xhtml+xml`, or sniffed from a generic/missing content type) is
//!   converted with [`html::html_to_text`]; JSON, YAML, Markdown, plain text, XML and any other
//!   `text/*` are kept as they are. Anything else (images, PDFs, archives) is skipped.
//! * Each page is cut to `max_page_chars`; when all pages together exceed `max_total_chars`,
//!   the seeds' summarising rule applies ([`DocsLimits`]), and if that is not enough the longest
//!   pages are cut further until the total fits.
//! * The URLs a page links to are recorded (`discovered_urls`, absolute, resolved against the
//!   page's final URL): the whitelist may admit their hosts when the plan uses them. They are
//!   not fetched: one level only, so the stage stays bounded and predictable.
//!
//! Nothing here fails the call: a page that cannot be used is a warning naming the URL and the
//! reason, and generation goes on with the rest (the LLM may know a well-known API anyway).

use std::time::{Duration, Instant};

use futures_util::StreamExt;
use serde::Serialize;
use sha2::{Digest, Sha256};
use url::Url;

use crate::generate::html;
use crate::serve::egress::{Egress, Failure};

/// Most URLs taken from one prompt.
pub const MAX_PROMPT_URLS: usize = 20;
/// Pages fetched at the same time.
pub const CONCURRENCY: usize = 4;
const ACCEPT: &str = "text/html, text/markdown, text/plain, application/json;q=0.9, */*;q=0.5";
/// Fenced-block languages the summarising rule keeps from the middle of a page.
const DEFINITION_LANGUAGES: &[&str] = &["json", "jsonc", "json5", "yaml", "yml", "http", "openapi"];
/// Content types that say nothing about the body: it is sniffed instead.
const GENERIC_TYPES: &[&str] = &["application/octet-stream", "binary/octet-stream", "application/unknown"];
const HTTP_METHODS: &[&str] = &["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"];

/// Limits of the fetching stage; the defaults are the seeds' numbers.
#[derive(Debug, Clone)]
pub struct DocsLimits {
    /// Per page (each attempt), from the request to the last body byte.
    pub timeout: Duration,
    /// Raw bytes fetched per page; a larger body is refused by the egress (a warning).
    pub max_page_bytes: u64,
    /// Characters of text kept per page.
    pub max_page_chars: usize,
    /// Characters of text kept over all pages; beyond it pages are summarised, then cut.
    pub max_total_chars: usize,
    /// Characters kept at the start and at the end of a summarised page.
    pub summary_edge_chars: usize,
}

impl Default for DocsLimits {
    fn default() -> Self {
        DocsLimits {
            timeout: Duration::from_secs(15),
            max_page_bytes: 5 * 1024 * 1024,
            max_page_chars: 100_000,
            max_total_chars: 200_000,
            summary_edge_chars: 20_000,
        }
    }
}

/// One fetched page, as recorded with the generation and shown to the planner.
#[derive(Debug, Clone, Serialize)]
pub struct FetchedDocument {
    /// The URL requested: the prompt's URL after the GitHub rewrite.
    pub url: String,
    /// The URL as written in the prompt.
    pub source_url: String,
    /// The URL the content came from, after redirects.
    pub final_url: String,
    /// The media type the text was read as: the response's (without parameters, lowercase), or
    /// the sniffed one when the response had none or a generic one.
    pub content_type: String,
    pub text: String,
    /// Hex SHA-256 of `text`.
    pub sha256: String,
    /// Size of the raw response body.
    pub bytes: usize,
    /// The text was cut (per-page or total limit).
    pub truncated: bool,
    /// The text was summarised (first and last part plus endpoint definitions).
    pub summarised: bool,
    /// Absolute http(s) URLs the page links to or mentions.
    pub discovered_urls: Vec<String>,
}

/// The documents that could be used, in prompt order, and a warning for everything that went
/// wrong or was cut.
#[derive(Debug, Clone, Serialize)]
pub struct DocsOutcome {
    pub documents: Vec<FetchedDocument>,
    pub warnings: Vec<String>,
}

/// The http(s) URLs in a prompt, as written: trailing sentence punctuation trimmed (a closing
/// bracket only when the URL did not open it), deduplicated (by the parsed URL without its
/// fragment), in order, at most [`MAX_PROMPT_URLS`].
pub fn extract_urls(prompt: &str) -> Vec<String> {
    let mut seen = std::collections::HashSet::new();
    let mut urls = Vec::new();
    html::scan_urls(prompt, false, |found| {
        if let html::Found::Bare(token) = found
            && let Ok(mut parsed) = Url::parse(&token)
            && parsed.host_str().is_some_and(|h| !h.is_empty())
        {
            // Deduplicate on the parsed form, so `HTTPS://A.test` and `https://a.test/` are one.
            parsed.set_fragment(None);
            if seen.insert(String::from(parsed)) {
                urls.push(token);
            }
        }
        urls.len() < MAX_PROMPT_URLS
    });
    urls
}

/// Where to fetch a GitHub URL's content from instead of its rendered page:
/// * `github.com/OWNER/REPO` (with `/`, `.git`, a query or a fragment) →
///   `raw.githubusercontent.com/OWNER/REPO/HEAD/README.md`;
/// * `…/tree/REF[/DIR]` → `…/REF[/DIR]/README.md` (a REF with slashes works too: the raw host
///   resolves `feature/x/README.md` the same way GitHub does);
/// * `…/blob/REF/PATH` and `…/raw/REF/PATH` → `raw.githubusercontent.com/OWNER/REPO/REF/PATH`.
///
/// Other GitHub pages (issues, wikis, site pages) are fetched as they are (`None`).
pub fn rewrite_github(url: &Url) -> Option<Url> {
    // First path segments that are GitHub's own pages, not users or organisations.
    const RESERVED: &[&str] = &[
        "about",
        "apps",
        "collections",
        "contact",
        "customer-stories",
        "enterprise",
        "events",
        "explore",
        "features",
        "github",
        "login",
        "marketplace",
        "new",
        "notifications",
        "orgs",
        "organizations",
        "pricing",
        "pulls",
        "issues",
        "search",
        "security",
        "settings",
        "site",
        "sponsors",
        "topics",
        "trending",
        "users",
        "join",
        "codespaces",
        "readme",
        "team",
        "resources",
        "solutions",
    ];
    if !matches!(url.scheme(), "http" | "https") || !matches!(url.host_str(), Some("github.com" | "www.github.com")) {
        return None;
    }
    let segments: Vec<&str> = url.path_segments()?.filter(|s| !s.is_empty()).collect();
    let (owner, repo) = (*segments.first()?, *segments.get(1)?);
    let repo = repo.strip_suffix(".git").unwrap_or(repo);
    let name_ok =
        |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    if !name_ok(owner) || !name_ok(repo) || RESERVED.contains(&owner.to_ascii_lowercase().as_str()) {
        return None;
    }
    let rest = &segments[2..];
    let path = match rest {
        [] => "HEAD/README.md".to_string(),
        ["tree", reference @ ..] if !reference.is_empty() => format!("{}/README.md", reference.join("/")),
        ["blob" | "raw", reference_and_path @ ..] if reference_and_path.len() >= 2 => reference_and_path.join("/"),
        _ => return None,
    };
    Url::parse(&format!("https://raw.githubusercontent.com/{owner}/{repo}/{path}")).ok()
}

/// Fetches the documents, at most [`CONCURRENCY`] at a time, and applies the limits. Never
/// fails: whatever cannot be used is a warning. Documents keep the order of `urls`; a URL that
/// repeats one already fetched (after the GitHub rewrite) is fetched once.
pub async fn fetch_documents(egress: &Egress, urls: &[String], limits: &DocsLimits) -> DocsOutcome {
    let started = Instant::now();
    let mut warnings = Vec::new();
    let mut jobs = Vec::new();
    let mut requested = std::collections::HashSet::new();
    for source in urls {
        let parsed = match Url::parse(source.trim()) {
            Ok(url) if matches!(url.scheme(), "http" | "https") && url.host_str().is_some() => url,
            _ => {
                warnings.push(format!("{source}: not an http(s) URL, skipped"));
                continue;
            }
        };
        let rewritten = rewrite_github(&parsed);
        let primary = rewritten.as_ref().unwrap_or(&parsed).to_string();
        if requested.insert(primary) {
            jobs.push((source.clone(), parsed, rewritten));
        }
    }

    let results: Vec<Result<(FetchedDocument, Vec<String>), Unfetched>> = futures_util::stream::iter(jobs)
        .map(|(source, parsed, rewritten)| fetch_one(egress, source, parsed, rewritten, limits))
        .buffered(CONCURRENCY)
        .collect()
        .await;
    let mut documents = Vec::new();
    for result in results {
        match result {
            Ok((document, page_warnings)) => {
                warnings.extend(page_warnings);
                documents.push(document);
            }
            Err(unfetched) => warnings.push(unfetched.to_string()),
        }
    }

    apply_total_limit(&mut documents, limits, &mut warnings);
    for document in &mut documents {
        document.sha256 = sha256_hex(document.text.as_bytes());
    }
    tracing::info!(
        requested = urls.len(),
        fetched = documents.len(),
        chars = documents.iter().map(|d| d.text.chars().count()).sum::<usize>(),
        warnings = warnings.len(),
        elapsed_ms = started.elapsed().as_millis() as u64,
        "fetched documentation"
    );
    DocsOutcome { documents, warnings }
}

/// A hash of the documents' content for the generation cache key: SHA-256 over the documents
/// sorted by URL, each as `url\ntext`, joined by `\n---\n`. Independent of fetch order; changes
/// when any text (or the set of URLs) changes.
pub fn content_hash(documents: &[FetchedDocument]) -> String {
    let mut sorted: Vec<&FetchedDocument> = documents.iter().collect();
    sorted.sort_by(|a, b| a.url.cmp(&b.url).then_with(|| a.text.cmp(&b.text)));
    let mut hasher = Sha256::new();
    for (i, document) in sorted.iter().enumerate() {
        if i > 0 {
            hasher.update(b"\n---\n");
        }
        hasher.update(document.url.as_bytes());
        hasher.update(b"\n");
        hasher.update(document.text.as_bytes());
    }
    hex::encode(hasher.finalize())
}

fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// One prompt URL: the rewritten URL first when there is one, the original page if that fails.
async fn fetch_one(
    egress: &Egress,
    source: String,
    parsed: Url,
    rewritten: Option<Url>,
    limits: &DocsLimits,
) -> Result<(FetchedDocument, Vec<String>), Unfetched> {
    let mut warnings = Vec::new();
    let page = match rewritten {
        Some(raw) => match fetch_page(egress, &raw, limits).await {
            Ok(page) => Ok((raw, page)),
            Err(reason) => {
                warnings.push(format!("{raw} (for {source}): {reason}; fetching {parsed} instead"));
                fetch_page(egress, &parsed, limits).await.map(|page| (parsed, page))
            }
        },
        None => fetch_page(egress, &parsed, limits).await.map(|page| (parsed, page)),
    };
    let (requested, page) = match page {
        Ok(found) => found,
        Err(reason) => {
            tracing::warn!(url = %source, %reason, "documentation fetch failed");
            return Err(Unfetched { url: source, reason });
        }
    };

    let Page { final_url, content_type, kind, body } = page;
    let raw = decode_body(&body, charset_of(&content_type).as_deref());
    // Links come from the raw body: in HTML they live in attributes the text no longer has.
    let discovered_urls = html::extract_links(&raw, &final_url);
    let mut text = match kind {
        Kind::Html => html::html_to_text(&raw),
        Kind::Text => raw,
    };
    let mut truncated = false;
    if let Some(original) = cut_to_chars(&mut text, limits.max_page_chars) {
        truncated = true;
        warnings.push(format!(
            "{requested}: text truncated to {} of {original} characters (max_page_chars)",
            limits.max_page_chars
        ));
    }
    let document = FetchedDocument {
        url: requested.to_string(),
        source_url: source,
        final_url: final_url.to_string(),
        content_type: essence(&content_type)
            .filter(|e| !GENERIC_TYPES.contains(&e.as_str()))
            .unwrap_or_else(|| kind.sniffed_type().to_string()),
        sha256: String::new(), // after the total limit, over the final text
        text,
        bytes: body.len(),
        truncated,
        summarised: false,
        discovered_urls,
    };
    Ok((document, warnings))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Html,
    Text,
}

impl Kind {
    fn sniffed_type(self) -> &'static str {
        match self {
            Kind::Html => "text/html",
            Kind::Text => "text/plain",
        }
    }
}

struct Page {
    final_url: Url,
    /// The response's Content-Type header, as sent (may be empty).
    content_type: String,
    kind: Kind,
    body: bytes::Bytes,
}

/// A prompt URL whose page could not be fetched, as the generation's warnings say it.
#[derive(Debug, thiserror::Error)]
#[error("could not fetch {url}: {reason}")]
struct Unfetched {
    /// The URL as the prompt gave it.
    url: String,
    reason: PageError,
}

/// Why a page is not a usable document.
#[derive(Debug, thiserror::Error)]
enum PageError {
    #[error("timed out after {} ms", .0.as_millis())]
    TimedOut(Duration),
    #[error(transparent)]
    Egress(#[from] Failure),
    #[error("HTTP status {status}{}", after_space(.status_text))]
    Status { status: u16, status_text: String },
    #[error("unsupported content type {media_type}")]
    UnsupportedType { media_type: String },
    #[error("no content type, and the body is neither HTML nor text")]
    NoContentType,
}

/// `text` after a space, or nothing when it is empty.
fn after_space(text: &str) -> String {
    if text.is_empty() { String::new() } else { format!(" {text}") }
}

/// Fetches one URL and checks that the response is a usable document; the error is the reason.
async fn fetch_page(egress: &Egress, url: &Url, limits: &DocsLimits) -> Result<Page, PageError> {
    // Clamped: the timeout comes from configuration, and an absurd one must not overflow.
    let timeout = limits.timeout.min(Duration::from_secs(86_400));
    let deadline = Instant::now() + timeout;
    let headers = vec![("accept".to_string(), ACCEPT.to_string())];
    // The egress honours the deadline itself (with a precise reason); the outer timeout is only a
    // backstop so that no path can hold the stage longer.
    let fetch = egress.fetch_document(url.as_str(), headers, limits.max_page_bytes, deadline);
    let response = match tokio::time::timeout(timeout + Duration::from_secs(1), fetch).await {
        Err(_) => return Err(PageError::TimedOut(timeout)),
        Ok(result) => result?,
    };
    if !(200..300).contains(&response.status) {
        return Err(PageError::Status { status: response.status, status_text: response.status_text });
    }
    let content_type = response
        .headers
        .iter()
        .find(|(name, _)| name.eq_ignore_ascii_case("content-type"))
        .map(|(_, value)| value.clone())
        .unwrap_or_default();
    let media_type = essence(&content_type);
    let kind = classify(media_type.as_deref(), &response.body).ok_or_else(|| match media_type.clone() {
        Some(media_type) => PageError::UnsupportedType { media_type },
        None => PageError::NoContentType,
    })?;
    let final_url = Url::parse(&response.url).unwrap_or_else(|_| url.clone());
    Ok(Page { final_url, content_type, kind, body: response.body })
}

/// The media type without parameters, lowercase; `None` when absent or empty.
fn essence(content_type: &str) -> Option<String> {
    let essence = content_type.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
    (!essence.is_empty()).then_some(essence)
}

fn charset_of(content_type: &str) -> Option<String> {
    content_type.split(';').skip(1).find_map(|param| {
        let (name, value) = param.split_once('=')?;
        name.trim().eq_ignore_ascii_case("charset").then(|| value.trim().trim_matches('"').to_ascii_lowercase())
    })
}

/// How to read a response body, or `None` when it is not a document we can use.
fn classify(essence: Option<&str>, body: &[u8]) -> Option<Kind> {
    match essence {
        Some("text/html" | "application/xhtml+xml") => Some(Kind::Html),
        Some(
            "application/json"
            | "application/yaml"
            | "application/x-yaml"
            | "application/xml"
            | "application/javascript"
            | "application/vnd.oai.openapi"
            | "application/graphql",
        ) => Some(Kind::Text),
        Some(t) if t.starts_with("image/") => None, // `image/svg+xml` is XML, but not documentation
        Some(t) if t.starts_with("text/") || t.ends_with("+json") || t.ends_with("+yaml") || t.ends_with("+xml") => {
            Some(Kind::Text)
        }
        // No type, or a generic one: look at the body.
        None => sniff(body),
        Some(generic) if GENERIC_TYPES.contains(&generic) => sniff(body),
        Some(_) => None,
    }
}

/// HTML if the body starts like an HTML document; text if it looks like text (valid UTF-8
/// without NUL bytes at the start); otherwise not usable.
fn sniff(body: &[u8]) -> Option<Kind> {
    let start = body.strip_prefix(b"\xef\xbb\xbf").unwrap_or(body);
    let start = &start[start.iter().position(|b| !b.is_ascii_whitespace()).unwrap_or(start.len())..];
    let head = &start[..start.len().min(64)];
    let starts = |prefix: &[u8]| head.len() >= prefix.len() && head[..prefix.len()].eq_ignore_ascii_case(prefix);
    if starts(b"<!doctype html") || starts(b"<html") {
        return Some(Kind::Html);
    }
    let sample = &body[..body.len().min(4096)];
    let text_like = !sample.contains(&0)
        && match std::str::from_utf8(sample) {
            Ok(_) => true,
            // A multi-byte character cut by the sample's end is fine.
            Err(e) => e.error_len().is_none(),
        };
    text_like.then_some(Kind::Text)
}

/// The body as text: UTF-8 (lossy) unless the header names a Latin-1 family charset, which
/// browsers read as Windows-1252. A UTF-8 byte-order mark is dropped.
fn decode_body(body: &[u8], charset: Option<&str>) -> String {
    let latin1 = matches!(
        charset,
        Some(
            "iso-8859-1" | "iso8859-1" | "latin1" | "latin-1" | "l1" | "windows-1252" | "cp1252" | "us-ascii" | "ascii"
        )
    );
    if latin1 {
        return body.iter().map(|b| windows_1252(*b)).collect();
    }
    let body = body.strip_prefix(b"\xef\xbb\xbf").unwrap_or(body);
    String::from_utf8_lossy(body).into_owned()
}

/// Cuts `text` to at most `limit` characters, ending with a line that says how much was cut.
/// Returns the original length in characters when it cut.
fn cut_to_chars(text: &mut String, limit: usize) -> Option<usize> {
    // Byte length bounds character count from above: the common case needs no counting.
    if text.len() <= limit {
        return None;
    }
    let total = text.chars().count();
    if total <= limit {
        return None;
    }
    // Room for the marker, which must fit inside the limit too.
    const MARKER_ROOM: usize = 64;
    let keep = if limit >= 2 * MARKER_ROOM { limit - MARKER_ROOM } else { limit };
    text.truncate(byte_index_of_char(text, keep));
    if keep < limit {
        let marker = format!("\n[… {} more characters cut …]", total - keep);
        text.push_str(&marker);
    }
    Some(total)
}

/// The byte index of the `n`th character (or the length when there are fewer).
fn byte_index_of_char(text: &str, n: usize) -> usize {
    text.char_indices().nth(n).map_or(text.len(), |(i, _)| i)
}

/// The total limit: summarise long pages, then cut the longest ones until the sum fits.
fn apply_total_limit(documents: &mut [FetchedDocument], limits: &DocsLimits, warnings: &mut Vec<String>) {
    let total: usize = documents.iter().map(|d| d.text.chars().count()).sum();
    if total <= limits.max_total_chars {
        return;
    }
    let edge = limits.summary_edge_chars;
    warnings.push(format!(
        "the documents have {total} characters, more than max_total_chars ({}); \
         pages longer than {} characters are summarised",
        limits.max_total_chars,
        edge.saturating_mul(2)
    ));
    for document in documents.iter_mut() {
        let before = document.text.chars().count();
        if let Some(summary) = summarise(&document.text, edge) {
            let after = summary.chars().count();
            if after < before {
                document.text = summary;
                document.summarised = true;
                warnings.push(format!(
                    "{}: summarised from {before} to {after} characters (first and last {edge} characters and the \
                     endpoint definitions in between)",
                    document.url
                ));
            }
        }
    }

    // Still too long: water-fill, so that every page keeps the same allowance `cap` (or all of
    // itself if shorter) and the longest pages are the ones cut.
    let lengths: Vec<usize> = documents.iter().map(|d| d.text.chars().count()).collect();
    if lengths.iter().sum::<usize>() <= limits.max_total_chars {
        return;
    }
    let mut sorted = lengths.clone();
    sorted.sort_unstable();
    let mut budget = limits.max_total_chars;
    let mut remaining = sorted.len();
    let mut cap = 0;
    for length in sorted {
        if length.saturating_mul(remaining) <= budget {
            budget -= length;
            remaining -= 1;
        } else {
            cap = budget / remaining;
            break;
        }
    }
    for (document, length) in documents.iter_mut().zip(lengths) {
        if length > cap {
            cut_to_chars(&mut document.text, cap);
            document.truncated = true;
            warnings.push(format!(
                "{}: cut from {length} to {cap} characters to fit max_total_chars ({})",
                document.url, limits.max_total_chars
            ));
        }
    }
}

/// The seeds' summarising rule: the first and last `edge` characters, plus what in between
/// looks like an endpoint definition — fenced JSON/YAML/HTTP blocks (or unlabelled ones that
/// start like JSON or a request line), request lines (`GET /items`), OpenAPI path keys — each
/// gap marked with `[… N characters omitted …]`. `None` when the text is not longer than 2×edge.
fn summarise(text: &str, edge: usize) -> Option<String> {
    if text.len() <= edge.saturating_mul(2) {
        return None;
    }
    let total = text.chars().count();
    if total <= edge.saturating_mul(2) {
        return None;
    }
    let head_end = byte_index_of_char(text, edge);
    let tail_start = byte_index_of_char(text, total - edge);
    let middle = &text[head_end..tail_start];
    let mut summary = String::with_capacity(2 * edge + 1024);
    summary.push_str(&text[..head_end]);
    let mut at = 0;
    for (start, end) in definition_ranges(middle) {
        omitted(&mut summary, &middle[at..start]);
        summary.push_str(&middle[start..end]);
        at = end;
    }
    omitted(&mut summary, &middle[at..]);
    summary.push_str(&text[tail_start..]);
    Some(summary)
}

fn omitted(summary: &mut String, skipped: &str) {
    if skipped.is_empty() {
        return;
    }
    if !summary.ends_with('\n') {
        summary.push('\n');
    }
    summary.push_str(&format!("[… {} characters omitted …]\n", skipped.chars().count()));
}

/// Byte ranges of `text` (whole lines, merged when adjacent) that look like endpoint definitions.
fn definition_ranges(text: &str) -> Vec<(usize, usize)> {
    struct Fence {
        start: usize,
        marker: char,
        width: usize,
        /// Decided by the info string, or by the first non-blank line when there is none.
        keep: Option<bool>,
    }
    let mut ranges: Vec<(usize, usize)> = Vec::new();
    let mut push = |start: usize, end: usize| match ranges.last_mut() {
        Some(last) if last.1 == start => last.1 = end,
        _ => ranges.push((start, end)),
    };
    let mut fence: Option<Fence> = None;
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        let start = offset;
        offset += line.len();
        let trimmed = line.trim();
        if let Some(open) = fence.as_mut() {
            let closes = trimmed.len() >= open.width && trimmed.chars().all(|c| c == open.marker);
            if closes {
                if open.keep == Some(true) {
                    push(open.start, offset);
                }
                fence = None;
            } else if open.keep.is_none() && !trimmed.is_empty() {
                open.keep = Some(trimmed.starts_with(['{', '[']) || is_request_line(trimmed));
            }
            continue;
        }
        if let Some(marker) = trimmed.chars().next().filter(|c| matches!(c, '`' | '~')) {
            let width = trimmed.chars().take_while(|c| *c == marker).count();
            if width >= 3 {
                let info: String = trimmed[width * marker.len_utf8()..]
                    .trim_start_matches(['{', '.', ' '])
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '+' | '_'))
                    .collect::<String>()
                    .to_ascii_lowercase();
                let keep = if info.is_empty() { None } else { Some(DEFINITION_LANGUAGES.contains(&info.as_str())) };
                fence = Some(Fence { start, marker, width, keep });
                continue;
            }
        }
        if is_request_line(trimmed) || is_openapi_path_key(trimmed) {
            push(start, offset);
        }
    }
    // A block still open where the middle ends continues into the kept tail.
    if let Some(open) = fence.filter(|f| f.keep == Some(true)) {
        push(open.start, text.len());
    }
    ranges
}

/// `GET /items`, `- **POST** https://api…`, `| DELETE | /items/{id} |`: a method followed by a
/// path or URL, after Markdown list, heading, table, quote or emphasis decoration.
fn is_request_line(line: &str) -> bool {
    let line = line.trim_start_matches(['#', '-', '*', '|', '`', '>', ' ', '\t']);
    let Some(method) = HTTP_METHODS.iter().find(|m| line.starts_with(**m)) else { return false };
    let after = &line[method.len()..];
    let target = after.trim_start_matches(['`', '*', '|', ' ', '\t']);
    // The method must be a word of its own ("GETTING" is not a request line).
    target.len() < after.len() && (target.starts_with(['/', '{']) || target.starts_with("http"))
}

/// An OpenAPI path key: `"/items/{id}": {` in JSON, `/items/{id}:` in YAML.
fn is_openapi_path_key(line: &str) -> bool {
    (line.starts_with("\"/") && line.contains("\":")) || (line.starts_with('/') && line.ends_with(':'))
}

/// A byte of Windows-1252 (a superset of ISO-8859-1 as browsers read it) as a character;
/// the five undefined bytes become U+FFFD.
fn windows_1252(byte: u8) -> char {
    const HIGH: [char; 32] = [
        '€', '\u{fffd}', '‚', 'ƒ', '„', '…', '†', '‡', 'ˆ', '‰', 'Š', '‹', 'Œ', '\u{fffd}', 'Ž', '\u{fffd}',
        '\u{fffd}', '‘', '’', '“', '”', '•', '–', '—', '˜', '™', 'š', '›', 'œ', '\u{fffd}', 'ž', 'Ÿ',
    ];
    match byte {
        0x80..=0x9f => HIGH[usize::from(byte - 0x80)],
        _ => char::from(byte),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::SocketAddr;

    use axum::Router;
    use axum::http::{StatusCode, header};
    use axum::response::{IntoResponse, Redirect, Response};
    use axum::routing::get;

    // --- pure functions ------------------------------------------------------------------------

    #[test]
    fn extracts_urls_from_prompts() {
        let cases: &[(&str, &str, &[&str])] = &[
            ("none", "make me a weather tool", &[]),
            ("one", "Use https://api.example.com/docs for this", &["https://api.example.com/docs"]),
            ("http too", "see http://example.org", &["http://example.org"]),
            (
                "sentence punctuation",
                "Docs: https://a.test/x. Also https://b.test/y, and https://c.test/z!",
                &["https://a.test/x", "https://b.test/y", "https://c.test/z"],
            ),
            (
                "more punctuation",
                "(https://a.test/p); \"https://b.test/q\" 'https://c.test/r'? https://d.test/s:",
                &["https://a.test/p", "https://b.test/q", "https://c.test/r", "https://d.test/s"],
            ),
            (
                "wikipedia parens kept",
                "see https://en.wikipedia.org/wiki/Rust_(programming_language).",
                &["https://en.wikipedia.org/wiki/Rust_(programming_language)"],
            ),
            (
                "wikipedia in parens",
                "(see https://en.wikipedia.org/wiki/Foo_(bar))",
                &["https://en.wikipedia.org/wiki/Foo_(bar)"],
            ),
            ("markdown link", "[the API](https://api.test/v1) docs", &["https://api.test/v1"]),
            ("brackets", "[https://a.test/x] {https://b.test/y}", &["https://a.test/x", "https://b.test/y"]),
            ("query and fragment kept", "https://a.test/p?q=1&r=2#frag", &["https://a.test/p?q=1&r=2#frag"]),
            (
                "dedupe keeps first spelling",
                "https://A.test/x https://a.test/x https://a.test/x#y https://b.test",
                &["https://A.test/x", "https://b.test"],
            ),
            ("trailing slash dedupes", "https://a.test https://a.test/", &["https://a.test"]),
            (
                "other schemes ignored",
                "ftp://a.test/f mailto:x@y.test file:///etc/passwd ws://a.test javascript:x",
                &[],
            ),
            ("scheme needs a word boundary", "xhttps://a.test/ myhttp://b.test", &[]),
            ("uppercase scheme", "HTTPS://A.TEST/X", &["HTTPS://A.TEST/X"]),
            ("angle brackets", "<https://a.test/x>", &["https://a.test/x"]),
            ("backticks", "`https://a.test/x`", &["https://a.test/x"]),
            ("bare scheme", "https:// and http://", &[]),
            ("unicode path", "https://de.wikipedia.org/wiki/Köln.", &["https://de.wikipedia.org/wiki/Köln"]),
            ("ports", "http://localhost:8080/api,", &["http://localhost:8080/api"]),
            ("markdown bold", "**https://a.test/x**", &["https://a.test/x"]),
        ];
        for (what, prompt, want) in cases {
            assert_eq!(extract_urls(prompt), *want, "{what}");
        }
    }

    #[test]
    fn extracts_at_most_twenty_urls() {
        let prompt: String = (0..30).map(|i| format!("https://h{i}.test/ ")).collect();
        let urls = extract_urls(&prompt);
        assert_eq!(urls.len(), MAX_PROMPT_URLS);
        assert_eq!(urls[19], "https://h19.test/");
    }

    #[test]
    fn rewrites_github_urls() {
        let raw = "https://raw.githubusercontent.com";
        let cases: &[(&str, Option<String>)] = &[
            ("https://github.com/HackerNews/API", Some(format!("{raw}/HackerNews/API/HEAD/README.md"))),
            ("https://github.com/HackerNews/API/", Some(format!("{raw}/HackerNews/API/HEAD/README.md"))),
            ("https://github.com/HackerNews/API.git", Some(format!("{raw}/HackerNews/API/HEAD/README.md"))),
            ("http://www.github.com/o/r#readme", Some(format!("{raw}/o/r/HEAD/README.md"))),
            ("https://github.com/o/r?tab=readme-ov-file", Some(format!("{raw}/o/r/HEAD/README.md"))),
            ("https://github.com/o/r/tree/main", Some(format!("{raw}/o/r/main/README.md"))),
            ("https://github.com/o/r/tree/v2/docs", Some(format!("{raw}/o/r/v2/docs/README.md"))),
            ("https://github.com/o/r/blob/main/docs/api.md", Some(format!("{raw}/o/r/main/docs/api.md"))),
            ("https://github.com/o/r/blob/main/openapi.yaml?plain=1", Some(format!("{raw}/o/r/main/openapi.yaml"))),
            ("https://github.com/o/r/raw/v1/spec.json", Some(format!("{raw}/o/r/v1/spec.json"))),
            ("https://github.com/o/r.js", Some(format!("{raw}/o/r.js/HEAD/README.md"))),
            ("https://github.com/o/r/blob/main", None),
            ("https://github.com/o/r/issues/1", None),
            ("https://github.com/o/r/wiki", None),
            ("https://github.com/o", None),
            ("https://github.com/", None),
            ("https://github.com/orgs/rust-lang", None),
            ("https://github.com/features/actions", None),
            ("https://github.com/settings/tokens", None),
            ("https://gist.github.com/o/abc", None),
            ("https://api.github.com/repos/o/r", None),
            ("https://raw.githubusercontent.com/o/r/HEAD/README.md", None),
            ("https://example.com/o/r", None),
        ];
        for (input, want) in cases {
            let got = rewrite_github(&Url::parse(input).unwrap()).map(String::from);
            assert_eq!(got, *want, "{input}");
        }
    }

    fn document(url: &str, text: &str) -> FetchedDocument {
        FetchedDocument {
            url: url.into(),
            source_url: url.into(),
            final_url: url.into(),
            content_type: "text/plain".into(),
            text: text.into(),
            sha256: sha256_hex(text.as_bytes()),
            bytes: text.len(),
            truncated: false,
            summarised: false,
            discovered_urls: vec![],
        }
    }

    #[test]
    fn content_hash_is_stable_and_sensitive() {
        let a = document("https://a.test/", "alpha");
        let b = document("https://b.test/", "beta");
        let base = content_hash(&[a.clone(), b.clone()]);
        assert_eq!(base.len(), 64);
        assert_eq!(base, content_hash(&[a.clone(), b.clone()]), "deterministic");
        assert_eq!(base, content_hash(&[b.clone(), a.clone()]), "independent of order");
        let mut changed = b.clone();
        changed.text.push('!');
        assert_ne!(base, content_hash(&[a.clone(), changed]), "text change");
        let mut moved = b.clone();
        moved.url = "https://c.test/".into();
        assert_ne!(base, content_hash(&[a.clone(), moved]), "url change");
        assert_ne!(base, content_hash(std::slice::from_ref(&a)), "document removed");
        // The separator keeps boundaries: moving text between documents changes the hash.
        let shifted = [document("https://a.test/", "alphab"), document("https://b.test/", "eta")];
        assert_ne!(base, content_hash(&shifted));
        // The documented format.
        let expected = sha256_hex(b"https://a.test/\nalpha\n---\nhttps://b.test/\nbeta");
        assert_eq!(base, expected);
        assert_eq!(content_hash(&[]), sha256_hex(b""));
    }

    #[test]
    fn classifies_content_types() {
        let html = b"<!DOCTYPE html><p>x";
        let cases: &[(Option<&str>, &[u8], Option<Kind>)] = &[
            (Some("text/html"), b"x", Some(Kind::Html)),
            (Some("application/xhtml+xml"), b"x", Some(Kind::Html)),
            (Some("application/json"), b"{}", Some(Kind::Text)),
            (Some("application/problem+json"), b"{}", Some(Kind::Text)),
            (Some("application/vnd.oai.openapi+json"), b"{}", Some(Kind::Text)),
            (Some("text/markdown"), b"#", Some(Kind::Text)),
            (Some("text/x-markdown"), b"#", Some(Kind::Text)),
            (Some("text/plain"), b"x", Some(Kind::Text)),
            (Some("text/yaml"), b"a: 1", Some(Kind::Text)),
            (Some("application/yaml"), b"a: 1", Some(Kind::Text)),
            (Some("application/x-yaml"), b"a: 1", Some(Kind::Text)),
            (Some("text/whatever"), b"x", Some(Kind::Text)),
            (Some("image/png"), b"\x89PNG", None),
            (Some("image/svg+xml"), b"<svg/>", None),
            (Some("application/pdf"), b"%PDF", None),
            (Some("application/zip"), b"PK", None),
            (None, html, Some(Kind::Html)),
            (Some("application/octet-stream"), b"  <HTML lang=en>", Some(Kind::Html)),
            (Some("application/octet-stream"), b"# Title\nplain", Some(Kind::Text)),
            (None, b"\x89PNG\r\n\x1a\n\0\0", None),
            (None, b"\xff\xfe\xfa", None),
        ];
        for (essence, body, want) in cases {
            assert_eq!(classify(*essence, body), *want, "{essence:?} {body:?}");
        }
        assert_eq!(essence(" Text/HTML ; charset=UTF-8"), Some("text/html".into()));
        assert_eq!(essence(""), None);
        assert_eq!(charset_of("text/html; charset=\"ISO-8859-1\""), Some("iso-8859-1".into()));
        assert_eq!(decode_body(b"caf\xe9 \x93q\x94", Some("iso-8859-1")), "café “q”");
        assert_eq!(decode_body(b"\xef\xbb\xbfok \xff", None), "ok \u{fffd}");
    }

    #[test]
    fn cuts_on_char_boundaries() {
        let mut text = "é".repeat(1000);
        assert_eq!(cut_to_chars(&mut text, 1000), None);
        assert_eq!(cut_to_chars(&mut text, 500), Some(1000));
        assert!(text.chars().count() <= 500, "{}", text.chars().count());
        assert!(text.starts_with(&"é".repeat(400)));
        assert!(text.ends_with("more characters cut …]"));
        // Tiny limits: a hard cut, no marker.
        let mut small = "abcdef".to_string();
        assert_eq!(cut_to_chars(&mut small, 3), Some(6));
        assert_eq!(small, "abc");
        let mut zero = "abc".to_string();
        cut_to_chars(&mut zero, 0);
        assert_eq!(zero, "");
    }

    #[test]
    fn summarises_keeping_edges_and_definitions() {
        let filler = |n: usize, c: char| -> String {
            let line = format!("{}\n", c.to_string().repeat(79));
            line.repeat(n / 80)
        };
        let middle = format!(
            "{}## Items\nGET /v1/items lists items\n{}```json\n{{\"id\": 1}}\n```\n{}```python\nprint(1)\n```\n\
             - `DELETE /v1/items/{{id}}`\n```\n{{\"unlabelled\": true}}\n```\n```\nnot json\n```\n\"/v1/things\": {{\n  /v1/yaml:\n{}",
            filler(4_000, 'm'),
            filler(4_000, 'n'),
            filler(4_000, 'o'),
            filler(4_000, 'p'),
        );
        let text = format!("{}{}{}", filler(10_000, 'h'), middle, filler(10_000, 't'));
        let summary = summarise(&text, 10_000).unwrap();
        assert!(summary.starts_with(&filler(10_000, 'h')));
        assert!(summary.ends_with(&filler(10_000, 't')));
        for kept in [
            "GET /v1/items lists items\n",
            "```json\n{\"id\": 1}\n```\n",
            "- `DELETE /v1/items/{id}`\n```\n{\"unlabelled\": true}\n```\n",
            "\"/v1/things\": {\n  /v1/yaml:\n",
        ] {
            assert!(summary.contains(kept), "{kept:?} missing");
        }
        for dropped in ["## Items", "print(1)", "not json", "mmmm", "nnnn", "oooo", "pppp"] {
            assert!(!summary.contains(dropped), "{dropped:?} kept");
        }
        assert!(summary.contains("[… 4009 characters omitted …]\nGET /v1/items"), "{}", &summary[9_990..10_100]);
        assert!(summary.contains("characters omitted …]\n"));
        assert!(summary.chars().count() < 21_000, "{}", summary.chars().count());
        // Short texts are not summarised.
        assert_eq!(summarise("short", 10), None);
        assert_eq!(summarise(&"x".repeat(20), 10), None);
        // A cut inside multi-byte characters stays valid.
        let wide = "é".repeat(100);
        let s = summarise(&wide, 10).unwrap();
        assert!(s.starts_with(&"é".repeat(10)) && s.ends_with(&"é".repeat(10)));
    }

    #[test]
    fn request_lines() {
        let cases = [
            ("GET /items", true),
            ("POST https://api.test/x", true),
            ("- **PUT** /a", true),
            ("| DELETE | /items/{id} |", true),
            ("### `PATCH /users/{id}`", true),
            ("GET {base}/items", true),
            ("GETTING /started", false),
            ("GET", false),
            ("get /items", false),
            ("Use GET /items", false),
        ];
        for (line, want) in cases {
            assert_eq!(is_request_line(line), want, "{line}");
        }
    }

    #[test]
    fn total_limit_water_fills() {
        let limits = DocsLimits { max_total_chars: 1_000, summary_edge_chars: 10_000, ..DocsLimits::default() };
        let mut documents = vec![
            document("https://a.test/", &"a".repeat(100)),
            document("https://b.test/", &"b".repeat(2_000)),
            document("https://c.test/", &"c".repeat(600)),
        ];
        let mut warnings = Vec::new();
        apply_total_limit(&mut documents, &limits, &mut warnings);
        let lengths: Vec<usize> = documents.iter().map(|d| d.text.chars().count()).collect();
        assert_eq!(lengths[0], 100, "short pages are left alone");
        assert!(lengths.iter().sum::<usize>() <= 1_000, "{lengths:?}");
        assert!(lengths[1] <= 450 && lengths[2] <= 450 && lengths[1] >= 400, "{lengths:?}");
        assert!(documents[1].truncated && documents[2].truncated && !documents[0].truncated);
        assert!(
            warnings.iter().any(|w| w.contains("https://b.test/") && w.contains("max_total_chars")),
            "{warnings:?}"
        );
    }

    // --- against a loopback server -------------------------------------------------------------

    const HTML_PAGE: &str = r#"<!DOCTYPE html>
<html><head><title>Items API</title><style>body { color: red }</style>
<script>window.analytics = "https://tracker.example.test/t.js";</script></head>
<body><nav><a href="/home">Home</a> | <a href="/pricing">Pricing</a></nav>
<header>Site banner</header>
<main><h1>Items</h1>
<p>List items with <code>GET https://api.example.test/v1/items</code>. See
<a href="https://api.example.test/v1/items">the endpoint</a> and <a href="/relative/path">more</a>.</p>
<pre><code class="language-json">{"id": 1, "name": "thing"}</code></pre>
</main><footer>&copy; Example</footer></body></html>"#;

    struct Server {
        addr: SocketAddr,
        _shutdown: tokio::sync::oneshot::Sender<()>,
    }

    impl Server {
        fn url(&self, path: &str) -> String {
            format!("http://docs.example.test:{}{path}", self.addr.port())
        }
    }

    fn big_text(chars: usize, fill: char) -> String {
        let line = format!("{}\n", fill.to_string().repeat(99));
        line.repeat(chars / 100)
    }

    /// A 100k-character HTML page: paragraphs, with an endpoint definition in the middle.
    fn big_html(label: &str) -> String {
        let paragraph = format!("<p>{} </p>\n", label.repeat(16)); // 16×len characters and a blank line of text
        let mut page = String::from("<html><body><main>");
        let mut text_chars = 0;
        let mut definition_written = false;
        while text_chars < 98_000 {
            if text_chars >= 50_000 && !definition_written {
                definition_written = true;
                page.push_str("<pre><code class=\"language-json\">{\"endpoint\": \"GET /v1/");
                page.push_str(label);
                page.push_str("\"}</code></pre>\n<p>GET /v1/");
                page.push_str(label);
                page.push_str("/{id}</p>\n");
            }
            page.push_str(&paragraph);
            text_chars += label.len() * 16 + 2;
        }
        page.push_str("</main></body></html>");
        page
    }

    async fn serve() -> Server {
        let openapi = serde_json::json!({
            "openapi": "3.0.0",
            "servers": [{"url": "https://api.example.test/v1"}],
            "paths": {"/items": {"get": {"summary": "List items"}}}
        })
        .to_string();
        let big = big_text(300_000, 'x');
        let hundred = [big_text(100_000, 'a'), big_text(100_000, 'b'), big_text(100_000, 'c')];
        let htmls = [big_html("alpha"), big_html("beta"), big_html("gamma")];
        let app = Router::new()
            .route("/page.html", get(|| async { ([(header::CONTENT_TYPE, "text/html; charset=utf-8")], HTML_PAGE) }))
            .route(
                "/guide.md",
                get(|| async { ([(header::CONTENT_TYPE, "text/markdown")], "# Guide\n\nCall `GET /v1/items`.\n") }),
            )
            .route(
                "/openapi.json",
                get(move || {
                    let body = openapi.clone();
                    async move { ([(header::CONTENT_TYPE, "application/json")], body) }
                }),
            )
            .route("/missing", get(|| async { (StatusCode::NOT_FOUND, "no such page") }))
            .route(
                "/slow",
                get(|| async {
                    tokio::time::sleep(Duration::from_secs(5)).await;
                    "late"
                }),
            )
            .route("/docs/old", get(|| async { Redirect::temporary("/docs/new/") }))
            .route(
                "/docs/new/",
                get(|| async {
                    ([(header::CONTENT_TYPE, "text/html")], "<p>Moved here. <a href=\"child\">child</a></p>")
                }),
            )
            .route(
                "/logo.png",
                get(|| async { ([(header::CONTENT_TYPE, "image/png")], b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR".to_vec()) }),
            )
            .route(
                "/untyped",
                get(|| async {
                    let mut response =
                        Response::new(axum::body::Body::from("<!doctype html><title>T</title><p>sniffed"));
                    response.headers_mut().remove(header::CONTENT_TYPE);
                    response
                }),
            )
            .route(
                "/octet",
                get(|| async {
                    ([(header::CONTENT_TYPE, "application/octet-stream")], "<html><p>octet html</p></html>")
                }),
            )
            .route(
                "/big.txt",
                get(move || {
                    let body = big.clone();
                    async move { ([(header::CONTENT_TYPE, "text/plain")], body) }
                }),
            )
            .route(
                "/part/{n}",
                get(move |axum::extract::Path(n): axum::extract::Path<usize>| {
                    let body = hundred.get(n).cloned().unwrap_or_default();
                    async move { ([(header::CONTENT_TYPE, "text/plain")], body).into_response() }
                }),
            )
            .route(
                "/html/{n}",
                get(move |axum::extract::Path(n): axum::extract::Path<usize>| {
                    let body = htmls.get(n).cloned().unwrap_or_default();
                    async move { ([(header::CONTENT_TYPE, "text/html")], body).into_response() }
                }),
            );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(async move {
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(async {
                    let _ = rx.await;
                })
                .await;
        });
        Server { addr, _shutdown: tx }
    }

    fn egress(allow_private_networks: bool) -> Egress {
        crate::install_crypto_provider();
        let env = vec![
            ("MCPBOOTD_EGRESS__ALLOW_PRIVATE_NETWORKS".to_string(), allow_private_networks.to_string()),
            ("MCPBOOTD_EGRESS__RESOLVE__docs.example.test".to_string(), "127.0.0.1".to_string()),
        ];
        let config = crate::config::Config::load(None, env, &Default::default()).unwrap();
        Egress::new(&config, Default::default()).unwrap()
    }

    fn fast() -> DocsLimits {
        DocsLimits { timeout: Duration::from_millis(300), ..DocsLimits::default() }
    }

    #[tokio::test]
    async fn fetches_and_converts_each_kind() {
        let server = serve().await;
        let egress = egress(true);
        let paths = ["/page.html", "/guide.md", "/openapi.json", "/docs/old", "/untyped", "/octet"];
        let urls: Vec<String> = paths.iter().map(|p| server.url(p)).collect();
        let outcome = fetch_documents(&egress, &urls, &fast()).await;
        assert!(outcome.warnings.is_empty(), "{:?}", outcome.warnings);
        let docs = &outcome.documents;
        assert_eq!(docs.iter().map(|d| d.source_url.clone()).collect::<Vec<_>>(), urls, "input order");

        let page = &docs[0];
        assert_eq!(page.content_type, "text/html");
        assert_eq!(page.url, urls[0]);
        assert_eq!(page.final_url, urls[0]);
        assert_eq!(page.bytes, HTML_PAGE.len());
        assert!(
            page.text.starts_with("Items API\n\nItems\n\nList items with GET https://api.example.test/v1/items."),
            "{}",
            page.text
        );
        assert!(page.text.contains("```json\n{\"id\": 1, \"name\": \"thing\"}\n```"), "{}", page.text);
        for chrome in ["Home", "Pricing", "Site banner", "color: red", "analytics", "©", "<"] {
            assert!(!page.text.contains(chrome), "{chrome:?} in {}", page.text);
        }
        assert_eq!(
            page.discovered_urls,
            vec![
                "https://tracker.example.test/t.js".to_string(),
                server.url("/home"),
                server.url("/pricing"),
                "https://api.example.test/v1/items".to_string(),
                server.url("/relative/path"),
            ]
        );
        assert_eq!(page.sha256, sha256_hex(page.text.as_bytes()));
        assert!(!page.truncated && !page.summarised);

        let guide = &docs[1];
        assert_eq!(guide.content_type, "text/markdown");
        assert_eq!(guide.text, "# Guide\n\nCall `GET /v1/items`.\n");
        assert!(guide.discovered_urls.is_empty());

        let openapi = &docs[2];
        assert_eq!(openapi.content_type, "application/json");
        let parsed: serde_json::Value = serde_json::from_str(&openapi.text).unwrap();
        assert_eq!(parsed["paths"]["/items"]["get"]["summary"], "List items");
        assert_eq!(openapi.discovered_urls, vec!["https://api.example.test/v1".to_string()]);

        let moved = &docs[3];
        assert_eq!(moved.url, urls[3]);
        assert_eq!(moved.final_url, server.url("/docs/new/"));
        assert_eq!(moved.text, "Moved here. child");
        assert_eq!(moved.discovered_urls, vec![server.url("/docs/new/child")], "resolved against the final URL");

        assert_eq!(docs[4].content_type, "text/html", "sniffed without a content type");
        assert_eq!(docs[4].text, "T\n\nsniffed");
        assert_eq!(docs[5].content_type, "text/html", "sniffed from octet-stream");
        assert_eq!(docs[5].text, "octet html");

        let again = fetch_documents(&egress, &urls, &fast()).await;
        assert_eq!(content_hash(&again.documents), content_hash(docs), "same content, same hash");
    }

    #[test]
    fn failure_reasons_read_as_before() {
        let cases = [
            (PageError::TimedOut(Duration::from_millis(1500)), "timed out after 1500 ms"),
            (PageError::Egress(Failure::Network("connection refused".into())), "connection refused"),
            (PageError::Status { status: 404, status_text: "Not Found".into() }, "HTTP status 404 Not Found"),
            (PageError::Status { status: 599, status_text: String::new() }, "HTTP status 599"),
            (PageError::UnsupportedType { media_type: "image/png".into() }, "unsupported content type image/png"),
            (PageError::NoContentType, "no content type, and the body is neither HTML nor text"),
        ];
        for (reason, expected) in cases {
            assert_eq!(reason.to_string(), expected);
        }
        let unfetched = Unfetched { url: "https://docs.example.test/api".into(), reason: PageError::NoContentType };
        assert_eq!(
            unfetched.to_string(),
            "could not fetch https://docs.example.test/api: no content type, and the body is neither HTML nor text"
        );
    }

    #[tokio::test]
    async fn failures_are_warnings() {
        let server = serve().await;
        let egress = egress(true);
        let closed = {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            listener.local_addr().unwrap().port()
        };
        let urls = vec![
            server.url("/missing"),
            server.url("/slow"),
            server.url("/logo.png"),
            format!("http://docs.example.test:{closed}/"),
            "ftp://docs.example.test/file".to_string(),
            "not a url".to_string(),
            server.url("/guide.md"),
        ];
        let started = Instant::now();
        let outcome = fetch_documents(&egress, &urls, &fast()).await;
        let took = started.elapsed();
        assert!(took < Duration::from_secs(2), "the slow page is bounded by the timeout: {took:?}");
        assert_eq!(outcome.documents.len(), 1, "{:?}", outcome.warnings);
        assert_eq!(outcome.documents[0].source_url, server.url("/guide.md"));
        let expect = [
            (&urls[4], "not an http(s) URL"),
            (&urls[5], "not an http(s) URL"),
            (&urls[0], "HTTP status 404 Not Found"),
            (&urls[1], "timed out"),
            (&urls[2], "unsupported content type image/png"),
            (&urls[3], "could not fetch"),
        ];
        assert_eq!(outcome.warnings.len(), expect.len(), "{:?}", outcome.warnings);
        for (warning, (url, reason)) in outcome.warnings.iter().zip(expect) {
            assert!(
                warning.contains(url.as_str()) && warning.contains(reason),
                "{warning:?} should name {url} and {reason:?}"
            );
        }
    }

    #[tokio::test]
    async fn private_addresses_are_denied_by_default() {
        let server = serve().await;
        let egress = egress(false);
        let outcome = fetch_documents(&egress, &[server.url("/guide.md")], &fast()).await;
        assert!(outcome.documents.is_empty());
        assert_eq!(outcome.warnings.len(), 1);
        let warning = &outcome.warnings[0];
        assert!(warning.contains("docs.example.test") && warning.contains("not a public address"), "{warning}");
    }

    #[tokio::test]
    async fn refuses_bodies_over_the_byte_cap() {
        let server = serve().await;
        let egress = egress(true);
        let limits = DocsLimits { max_page_bytes: 10_000, ..fast() };
        let outcome = fetch_documents(&egress, &[server.url("/big.txt"), server.url("/guide.md")], &limits).await;
        assert_eq!(outcome.documents.len(), 1);
        assert!(
            outcome.warnings[0].contains("/big.txt") && outcome.warnings[0].contains("10000"),
            "{:?}",
            outcome.warnings
        );
    }

    #[tokio::test]
    async fn truncates_long_pages() {
        let server = serve().await;
        let egress = egress(true);
        let outcome = fetch_documents(&egress, &[server.url("/big.txt")], &fast()).await;
        let doc = &outcome.documents[0];
        assert_eq!(doc.bytes, 300_000);
        assert!(doc.truncated && !doc.summarised);
        assert!(doc.text.chars().count() <= 100_000);
        assert!(doc.text.chars().count() > 99_000);
        assert!(doc.text.ends_with("more characters cut …]"));
        assert_eq!(doc.sha256, sha256_hex(doc.text.as_bytes()));
        assert_eq!(outcome.warnings.len(), 1, "{:?}", outcome.warnings);
        assert!(outcome.warnings[0].contains("/big.txt") && outcome.warnings[0].contains("truncated"));
    }

    #[tokio::test]
    async fn summarises_over_the_total_and_then_cuts() {
        let server = serve().await;
        let egress = egress(true);
        let urls: Vec<String> = (0..3).map(|n| server.url(&format!("/part/{n}"))).collect();

        // 3 × 100k = 300k > 200k: each page keeps 20k + 20k.
        let outcome = fetch_documents(&egress, &urls, &fast()).await;
        let total: usize = outcome.documents.iter().map(|d| d.text.chars().count()).sum();
        assert!(total <= 200_000, "{total}");
        for (doc, fill) in outcome.documents.iter().zip(['a', 'b', 'c']) {
            assert!(doc.summarised && !doc.truncated, "{}", doc.url);
            assert!(doc.text.contains("[… 60000 characters omitted …]"), "{}", &doc.text[19_990..20_100]);
            assert!(doc.text.starts_with(&big_text(20_000, fill)));
            assert!(doc.text.ends_with(&big_text(20_000, fill)));
            assert_eq!(doc.sha256, sha256_hex(doc.text.as_bytes()));
        }
        assert!(outcome.warnings.iter().any(|w| w.contains("max_total_chars")), "{:?}", outcome.warnings);
        assert_eq!(outcome.warnings.iter().filter(|w| w.contains("summarised from 100000")).count(), 3);

        // A smaller total: summaries (~40k each) are still too long, so they are cut to fit.
        let limits = DocsLimits { max_total_chars: 90_000, ..fast() };
        let outcome = fetch_documents(&egress, &urls, &limits).await;
        let total: usize = outcome.documents.iter().map(|d| d.text.chars().count()).sum();
        assert!(total <= 90_000 && total > 85_000, "{total}");
        assert!(outcome.documents.iter().all(|d| d.summarised && d.truncated));
        let cuts = outcome.warnings.iter().filter(|w| w.contains("to fit max_total_chars")).count();
        assert_eq!(cuts, 3, "{:?}", outcome.warnings);

        // Under the total nothing happens.
        let outcome = fetch_documents(&egress, &urls[..2], &fast()).await;
        assert!(outcome.documents.iter().all(|d| !d.summarised && !d.truncated && d.text.chars().count() == 100_000));
        assert!(outcome.warnings.is_empty());
    }

    #[tokio::test]
    async fn three_large_html_pages_are_fast() {
        let server = serve().await;
        let egress = egress(true);
        let urls: Vec<String> = (0..3).map(|n| server.url(&format!("/html/{n}"))).collect();
        let limits = DocsLimits { max_total_chars: 10_000_000, ..fast() };
        fetch_documents(&egress, &urls[..1], &limits).await; // warm the connection pool
        let started = Instant::now();
        let outcome = fetch_documents(&egress, &urls, &limits).await;
        let took = started.elapsed();
        let chars: Vec<usize> = outcome.documents.iter().map(|d| d.text.chars().count()).collect();
        let bytes: usize = outcome.documents.iter().map(|d| d.bytes).sum();
        println!("fetched and converted 3 HTML pages ({bytes} bytes → {chars:?} characters) in {took:?}");
        assert!(outcome.warnings.is_empty(), "{:?}", outcome.warnings);
        assert!(chars.iter().all(|c| (95_000..=100_000).contains(c)), "{chars:?}");
        assert!(took < Duration::from_secs(1), "{took:?}");

        // With the default total they are summarised, and the endpoint definitions survive.
        let outcome = fetch_documents(&egress, &urls, &fast()).await;
        for (doc, label) in outcome.documents.iter().zip(["alpha", "beta", "gamma"]) {
            assert!(doc.summarised, "{}", doc.url);
            assert!(doc.text.contains(&format!("```json\n{{\"endpoint\": \"GET /v1/{label}\"}}\n```")), "{label}");
            assert!(doc.text.contains(&format!("\nGET /v1/{label}/{{id}}\n")), "{label}");
        }
    }

    #[tokio::test]
    async fn a_failed_rewrite_falls_back_to_the_original_page() {
        // The rewrite targets raw.githubusercontent.com over TLS; the fallback logic is the same
        // for any pair of URLs, so exercise it with two loopback ones.
        let server = serve().await;
        let egress = egress(true);
        let source = server.url("/guide.md");
        let parsed = Url::parse(&source).unwrap();
        let missing = Url::parse(&server.url("/missing")).unwrap();
        let (document, warnings) = fetch_one(&egress, source.clone(), parsed, Some(missing), &fast()).await.unwrap();
        assert_eq!(document.url, source);
        assert_eq!(document.content_type, "text/markdown");
        assert_eq!(warnings.len(), 1);
        assert!(warnings[0].contains("/missing") && warnings[0].contains("404") && warnings[0].contains("instead"));
    }

    #[tokio::test]
    async fn duplicate_urls_are_fetched_once() {
        let server = serve().await;
        let egress = egress(true);
        let urls = vec![server.url("/guide.md"), server.url("/guide.md"), server.url("/page.html")];
        let outcome = fetch_documents(&egress, &urls, &fast()).await;
        assert_eq!(outcome.documents.len(), 2);
        assert!(outcome.warnings.is_empty());
    }

    #[test]
    fn fetching_is_send() {
        fn assert_send<T: Send>(_: &T) {}
        let egress = egress(true);
        let limits = DocsLimits::default();
        let future = fetch_documents(&egress, &[], &limits);
        assert_send(&future);
    }
}
