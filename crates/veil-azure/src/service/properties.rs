//! Service-level handlers: Get/Set Service Properties, Get Service Stats and CORS preflight, and the
//! per-account store of the properties documents and their parsed CORS rules (which every response consults)
//! — kept durably in one file of the data directory when the server has one.

use std::collections::{BTreeMap, HashMap};
use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::Mutex;

use super::{Ctx, Service};
use crate::api::Output;
use crate::codec;
use crate::codec::properties::{self, CorsRule};
use crate::codec::xml::{self, Element};
use crate::error::{AzureError, AzureResult, ErrorCode};

/// The file in the data directory that holds every account's service properties.
const FILE_NAME: &str = "azure-service-properties.xml";
/// Its root element; each `<Account>` holds a `<Name>` and the account's `<StorageServiceProperties>`.
const ROOT: &str = "VeilAzureServiceProperties";

/// The service properties document of each account that set one. A Set rewrites the whole file atomically
/// (temporary file, fsync, rename, fsync of the directory) before it answers, so a 202 means the properties
/// survive a crash or restart. The documents are small and change rarely; one file is the simplest durable
/// home (the engine's store holds queues, not accounts).
pub(super) struct PropertiesStore {
    /// `None`: kept for the life of the process only (the crate's tests).
    path: Option<PathBuf>,
    /// Held across a Set's merge *and* its file write, so concurrent Sets cannot write the file in the
    /// opposite order of their merges (the file always holds the latest map). Reads take it briefly.
    documents: Mutex<HashMap<String, Stored>>,
}

/// An account's properties document and its CORS rules, parsed once when the document is loaded or set
/// (every response consults the rules).
#[derive(Clone)]
struct Stored {
    document: Element,
    cors: Arc<[CorsRule]>,
}

impl Stored {
    fn new(document: Element) -> Self {
        let cors = properties::cors_rules(&document).into();
        Self { document, cors }
    }
}

impl PropertiesStore {
    /// Loads `<data_dir>/azure-service-properties.xml` if there is one. A file that cannot be read or parsed
    /// is reported and the accounts start from Azure's defaults; the file is left as it is until a Set.
    pub(super) fn open(data_dir: Option<&Path>) -> Self {
        let path = data_dir.map(|dir| dir.join(FILE_NAME));
        let documents = match path.as_deref().map(load) {
            Some(Ok(documents)) => documents,
            Some(Err(error)) => {
                tracing::error!(%error, "Azure service properties unreadable; serving defaults");
                HashMap::new()
            }
            None => HashMap::new(),
        };
        let documents = documents
            .into_iter()
            .map(|(account, document)| (account, Stored::new(document)))
            .collect();
        Self {
            path,
            documents: Mutex::new(documents),
        }
    }

    /// The account's document, or Azure's defaults when it never set one.
    pub(super) fn get(&self, account: &str) -> Element {
        self.documents
            .lock()
            .get(account)
            .map(|stored| stored.document.clone())
            .unwrap_or_else(properties::default_properties)
    }

    /// The account's CORS rules (cheap to clone); empty when it set none.
    pub(super) fn cors_rules(&self, account: &str) -> Arc<[CorsRule]> {
        self.documents
            .lock()
            .get(account)
            .map(|stored| Arc::clone(&stored.cors))
            .unwrap_or_else(|| Arc::from([]))
    }

    /// Replaces the sections `update` contains and makes the result durable. The write blocks this worker
    /// for one small fsync'd file; Set Service Properties is an administrative call.
    fn merge(&self, account: &str, update: &Element) -> AzureResult<()> {
        let mut all = self.documents.lock();
        let merged = match all.get(account) {
            Some(current) => properties::merge(&current.document, update),
            None => properties::merge(&properties::default_properties(), update),
        };
        let mut next = all.clone();
        next.insert(account.to_string(), Stored::new(merged));
        if let Some(path) = &self.path {
            write_atomically(path, &encode(&next)).map_err(AzureError::internal)?;
        }
        *all = next;
        Ok(())
    }
}

fn load(path: &Path) -> io::Result<HashMap<String, Element>> {
    let bytes = match fs::read(path) {
        Ok(bytes) => bytes,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(HashMap::new()),
        Err(error) => return Err(error),
    };
    let invalid = |reason: String| io::Error::new(io::ErrorKind::InvalidData, reason);
    let root = xml::parse(&bytes).map_err(|e| invalid(format!("{}: {}", path.display(), e.0)))?;
    if root.name != ROOT {
        return Err(invalid(format!(
            "{}: not a {ROOT} document",
            path.display()
        )));
    }
    let mut documents = HashMap::new();
    for account in root.children_named("Account") {
        if let (Some(name), Some(document)) = (
            account.child_text("Name"),
            account.child("StorageServiceProperties"),
        ) {
            documents.insert(name.to_string(), document.clone());
        }
    }
    Ok(documents)
}

fn encode(documents: &HashMap<String, Stored>) -> String {
    let sorted: BTreeMap<&String, &Element> = documents
        .iter()
        .map(|(name, stored)| (name, &stored.document))
        .collect();
    let mut out = xml::writer();
    out.open(ROOT);
    for (name, document) in sorted {
        out.open("Account");
        out.leaf("Name", name);
        document.write(&mut out);
        out.close("Account");
    }
    out.close(ROOT);
    out.finish()
}

/// Writes `path` so that it holds either the old or the new content after a crash: a temporary file in the
/// same directory, fsync'd, renamed over `path`, then the directory fsync'd so the rename is durable.
fn write_atomically(path: &Path, content: &str) -> io::Result<()> {
    let temporary = path.with_extension("xml.tmp");
    let mut file = File::create(&temporary)?;
    file.write_all(content.as_bytes())?;
    file.sync_all()?;
    drop(file);
    fs::rename(&temporary, path)?;
    if let Some(dir) = path.parent() {
        File::open(dir)?.sync_all()?;
    }
    Ok(())
}

impl Service {
    pub(super) fn get_service_properties(&self, ctx: &Ctx) -> Output {
        Output::Xml(properties::to_document(&self.properties.get(&ctx.account)))
    }

    pub(super) fn set_service_properties(&self, ctx: &Ctx, xml: &str) -> AzureResult<Output> {
        let update = codec::parse_document(xml)
            .ok_or_else(|| AzureError::new(ErrorCode::InvalidXmlDocument))?;
        self.properties.merge(&ctx.account, &update)?;
        Ok(Output::Empty { status: 202 })
    }

    /// Veil has one copy; its "secondary" is always in sync.
    pub(super) fn service_stats(&self, ctx: &Ctx) -> Output {
        Output::ServiceStats {
            last_sync_time: ctx.now,
        }
    }

    /// A preflight is answered from the account's CORS rules without authentication.
    pub(super) fn preflight(
        &self,
        ctx: &Ctx,
        origin: String,
        method: String,
        headers: Vec<String>,
    ) -> AzureResult<Output> {
        let rules = self.properties.cors_rules(&ctx.account);
        let rule = properties::matching_rule(&rules, &origin, &method, &headers)
            .ok_or_else(|| AzureError::new(ErrorCode::CorsPreflightFailure))?;
        let wildcard = rule.allowed_origins.iter().any(|o| o == "*");
        Ok(Output::Preflight {
            allow_origin: if wildcard { "*".into() } else { origin },
            allow_methods: method,
            allow_headers: headers.join(","),
            max_age_s: rule.max_age_s,
        })
    }
}
