//! Service-level handlers: Get/Set Service Properties, Get Service Stats and CORS preflight, and the
//! per-account store of the properties documents.

use std::collections::HashMap;
use std::path::Path;

use parking_lot::Mutex;

use super::{Ctx, Service};
use crate::api::Output;
use crate::codec;
use crate::codec::properties;
use crate::codec::xml::Element;
use crate::error::{AzureError, AzureResult, ErrorCode};

/// The service properties document of each account that set one.
pub(super) struct PropertiesStore {
    /// Held for a whole read-modify-write of one account's document.
    documents: Mutex<HashMap<String, Element>>,
}

impl PropertiesStore {
    pub(super) fn open(_data_dir: Option<&Path>) -> Self {
        Self {
            documents: Mutex::new(HashMap::new()),
        }
    }

    /// The account's document, or Azure's defaults when it never set one.
    pub(super) fn get(&self, account: &str) -> Element {
        self.documents
            .lock()
            .get(account)
            .cloned()
            .unwrap_or_else(properties::default_properties)
    }

    /// Replaces the sections `update` contains.
    fn merge(&self, account: &str, update: &Element) -> AzureResult<()> {
        let mut all = self.documents.lock();
        let current = all
            .get(account)
            .cloned()
            .unwrap_or_else(properties::default_properties);
        all.insert(account.to_string(), properties::merge(&current, update));
        Ok(())
    }
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
        let rules = properties::cors_rules(&self.properties.get(&ctx.account));
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
