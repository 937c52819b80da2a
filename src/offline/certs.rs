//! `certs`: a CA and a serving certificate for the webhook's Service (and,
//! asked, a client certificate for kube-apiserver), written to a folder; the
//! caBundle on standard output.

use std::io::{self, Write};
use std::net::IpAddr;
use std::path::PathBuf;

use crate::error::{Error, Result};
use crate::output::escape;
use crate::pki::certificates as certs;

/// `certs`' settings, from the command line.
#[derive(Debug)]
pub struct Certs {
    /// The webhook's Service and namespace: the serving certificate's names.
    pub service: String,
    pub namespace: String,
    /// The folder written; an existing CA there is reused.
    pub out: PathBuf,
    /// Extra DNS names and IP addresses.
    pub dns: Vec<String>,
    pub ip: Vec<IpAddr>,
    /// Validity of the serving certificate, and of a new CA, in days.
    pub days: u32,
    pub ca_days: u32,
    /// A client certificate's Common Name.
    pub client: Option<String>,
}

/// Exit 0; 2 when a file cannot be read or written.
pub fn run(settings: Certs) -> Result<i32> {
    let Certs {
        service,
        namespace,
        out,
        dns,
        ip,
        days,
        ca_days,
        client,
    } = settings;
    let (ca_crt, ca_key) = (out.join("ca.crt"), out.join("ca.key"));
    let authority = if ca_crt.exists() && ca_key.exists() {
        // A CA someone else could have planted, or can still change, would
        // let them sign serving and client certificates this one trusts.
        for path in [out.as_path(), ca_crt.as_path(), ca_key.as_path()] {
            crate::files::mine(path).map_err(|e| {
                Error::io(
                    path,
                    io::Error::new(e.kind(), format!("{e}; not reusing the CA found there")),
                )
            })?;
        }
        let cert = std::fs::read_to_string(&ca_crt).map_err(|e| Error::io(&ca_crt, e))?;
        let key = std::fs::read_to_string(&ca_key).map_err(|e| Error::io(&ca_key, e))?;
        eprintln!("reusing the CA in {}", escape(&out.display().to_string()));
        certs::CertificateAuthority::from_pem(&cert, &key)?
    } else {
        certs::CertificateAuthority::generate(ca_days)?
    };
    let mut names = certs::service_names(&service, &namespace);
    names.extend(dns);
    let bundle = authority.issue(&names, &ip, days)?;
    certs::write(&bundle, &out)?;
    let wrote = format!(
        "wrote {0}/ca.crt, {0}/ca.key, {0}/tls.crt, {0}/tls.key (SANs: {1}); caBundle:",
        out.display(),
        names
            .iter()
            .cloned()
            .chain(ip.iter().map(ToString::to_string))
            .collect::<Vec<_>>()
            .join(", ")
    );
    eprintln!("{}", escape(&wrote));
    if let Some(name) = client {
        let client_bundle = authority.issue_client(&name, days)?;
        certs::write_client(&client_bundle, &out)?;
        let wrote = format!(
            "wrote {0}/client.crt, {0}/client.key (client certificate, CN {name})",
            out.display()
        );
        eprintln!("{}", escape(&wrote));
    }
    writeln!(io::stdout(), "{}", certs::ca_bundle(&bundle.ca_cert_pem)).map_err(Error::stdout)?;
    Ok(0)
}
