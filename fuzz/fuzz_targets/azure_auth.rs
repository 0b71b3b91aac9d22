//! Azure authentication parsing and checking on a raw HTTP request: `auth::credentials` (the `Authorization`
//! header — SharedKey, SharedKeyLite, Bearer — or a SAS in the query: account, queue and user delegation
//! SAS), the Shared Key strings-to-sign (canonicalized `x-ms-*` headers in both orders, the canonicalized
//! resource) and `verify_sas` (time window, `sip` address ranges, `spr`, a stored access policy), then
//! `SasGrant::authorize` for the operation the request names.
//!
//! Beyond "no panic": the credentials, re-signed with the account key over the string Veil itself builds,
//! always verify — a SharedKey/SharedKeyLite signature over `string_to_sign` / `lite_string_to_sign` is
//! accepted, and a SAS signed over its own string-to-sign is never refused for its signature (only, if at
//! all, for its time, address, protocol or fields). Signer and verifier cannot disagree on any request.
#![no_main]

use std::net::{IpAddr, Ipv4Addr};

use libfuzzer_sys::fuzz_target;
use veil_azure::api::SignedIdentifier;
use veil_azure::auth::{self, Credentials, HeaderOrder, KeyScheme, SasScope, SignedRequest};
use veil_azure::codec::{self, query::Query};
use veil_fuzz::RawRequest;

/// Azurite's well-known development key.
const DEV_KEY: &str =
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";

fuzz_target!(|data: &[u8]| {
    let Some(request) = RawRequest::parse(data) else {
        return;
    };
    let query = Query::parse(request.query);
    let Ok(credentials) = auth::credentials(&request.headers, &query) else {
        return;
    };
    let location = codec::locate(request.header("host"), request.path).ok();
    let account = location
        .as_ref()
        .map_or("devstoreaccount1", |l| l.primary_account());
    let queue = location.as_ref().and_then(|l| l.queue());
    let key = auth::decode_key(DEV_KEY).expect("base64");
    let signed = SignedRequest {
        method: request.method,
        path: request.path,
        query: request.query,
        headers: &request.headers,
    };
    match credentials {
        Credentials::SharedKey {
            scheme, signature, ..
        } => {
            let _ = auth::verify_shared_key(&signed, account, &key, &signature, scheme);
            for order in [HeaderOrder::Service, HeaderOrder::Ordinal] {
                let string_to_sign = match scheme {
                    KeyScheme::SharedKey => auth::string_to_sign(&signed, account, order),
                    KeyScheme::SharedKeyLite => auth::lite_string_to_sign(&signed, account, order),
                };
                let signature = auth::sign(&key, &string_to_sign);
                let verdict = auth::verify_shared_key(&signed, account, &key, &signature, scheme);
                assert!(
                    verdict.is_ok(),
                    "a correctly signed request is refused: {verdict:?}"
                );
            }
        }
        Credentials::Sas(mut sas) => {
            let policy = SignedIdentifier {
                id: "policy".into(),
                start: Some("2020-01-01T00:00:00Z".into()),
                expiry: Some("2100-01-01T00:00:00Z".into()),
                permission: Some("raup".into()),
            };
            let kind = location
                .as_ref()
                .and_then(|l| codec::route(request.method, l, &query).ok());
            for (peer, https, policy) in [
                (None, false, None),
                (Some(IpAddr::V4(Ipv4Addr::LOCALHOST)), true, Some(&policy)),
            ] {
                let scope = SasScope {
                    account,
                    queue,
                    now: 1_764_547_200_000,
                    peer,
                    policy,
                    https,
                };
                let _ = auth::verify_sas(&sas, &key, &scope);
                let string_to_sign = match (&sas.key, queue) {
                    (Some(signed_key), Some(queue)) => {
                        auth::user_delegation_sas_string_to_sign(account, queue, &sas, signed_key)
                    }
                    (None, _) if sas.is_account_sas() => {
                        auth::account_sas_string_to_sign(account, &sas)
                    }
                    (None, Some(queue)) => auth::queue_sas_string_to_sign(account, queue, &sas),
                    _ => continue,
                };
                sas.signature = auth::sign(&key, &string_to_sign);
                match auth::verify_sas(&sas, &key, &scope) {
                    Ok(grant) => {
                        if let Some(kind) = kind {
                            let _ = grant.authorize(kind);
                        }
                    }
                    Err(error) => assert!(
                        !error.message.starts_with("Signature did not match"),
                        "a correctly signed SAS is refused: {error:?}"
                    ),
                }
            }
        }
        Credentials::Bearer(_) | Credentials::Anonymous => {}
    }
});
