//! `idem acl add | list | remove`: the cluster's ACLs (issue 29), through any broker.
//! `add` and `remove` take one ACL: a principal, allow or deny, an operation and one
//! resource (`--topic`, `--group`, `--transactional-id` or `--cluster`), literal or
//! `--prefixed`. A bad word or an empty name is refused by the broker, naming it, and
//! nothing is stored.

use anyhow::Context;
use idem_client::admin::acls::{AclBinding, AclFilter};
use idem_client::Admin;

#[derive(Debug, clap::Subcommand)]
pub enum AclCommand {
    /// Store one ACL.
    Add(AclArgs),
    /// List the stored ACLs (all, or those of a principal or resource).
    List {
        #[arg(long)]
        principal: Option<String>,
        #[command(flatten)]
        resource: ResourceArgs,
    },
    /// Remove one stored ACL (given exactly as it was added).
    Remove(AclArgs),
}

#[derive(Debug, clap::Args)]
pub struct AclArgs {
    /// `User:<name>`, or `User:*` for every principal.
    #[arg(long)]
    principal: String,
    /// Allow the operation (the default).
    #[arg(long, conflicts_with = "deny")]
    allow: bool,
    /// Deny the operation: a deny wins over every allow.
    #[arg(long)]
    deny: bool,
    /// read, write, create, describe, alter, delete or all.
    #[arg(long)]
    operation: String,
    #[command(flatten)]
    resource: ResourceArgs,
    /// The name is a prefix: the ACL covers every name starting with it.
    #[arg(long)]
    prefixed: bool,
}

#[derive(Debug, Default, clap::Args)]
#[group(multiple = false)]
pub struct ResourceArgs {
    #[arg(long)]
    topic: Option<String>,
    #[arg(long)]
    group: Option<String>,
    #[arg(long)]
    transactional_id: Option<String>,
    /// The cluster itself (inter-node RPCs, admin, ACL changes).
    #[arg(long)]
    cluster: bool,
}

impl ResourceArgs {
    /// (resource type, name), or `None` when none is given.
    fn resource(&self) -> Option<(&'static str, String)> {
        match self {
            ResourceArgs { topic: Some(n), .. } => Some(("topic", n.clone())),
            ResourceArgs { group: Some(n), .. } => Some(("group", n.clone())),
            ResourceArgs {
                transactional_id: Some(n),
                ..
            } => Some(("transactional-id", n.clone())),
            ResourceArgs { cluster: true, .. } => Some(("cluster", String::new())),
            _ => None,
        }
    }
}

impl AclArgs {
    fn binding(&self) -> anyhow::Result<AclBinding> {
        let (resource_type, resource_name) = self
            .resource
            .resource()
            .context("name one resource: --topic, --group, --transactional-id or --cluster")?;
        Ok(AclBinding {
            principal: self.principal.clone(),
            resource_type: resource_type.to_string(),
            resource_name,
            pattern_type: if self.prefixed { "prefixed" } else { "literal" }.to_string(),
            operation: self.operation.clone(),
            permission: if self.deny { "deny" } else { "allow" }.to_string(),
        })
    }
}

fn line(acl: &AclBinding) -> String {
    format!(
        "{:<20} {:<6} {:<9} {:<17} {:<9} {}",
        acl.principal,
        acl.permission,
        acl.operation,
        acl.resource_type,
        acl.pattern_type,
        acl.resource_name
    )
}

pub async fn run(
    bootstrap: &str,
    access: &crate::access::Access,
    command: AclCommand,
) -> anyhow::Result<()> {
    let admin = Admin::connect_with(bootstrap, access.credentials.clone(), access.tls.clone())
        .await
        .with_context(|| format!("connecting to {bootstrap}"))?;
    match command {
        AclCommand::Add(args) => {
            let binding = args.binding()?;
            let created = admin
                .create_acls(std::slice::from_ref(&binding))
                .await
                .context("adding the ACL")?;
            let said = if created == 0 {
                "already stored"
            } else {
                "added"
            };
            println!("{said}: {}", line(&binding));
        }
        AclCommand::Remove(args) => {
            let binding = args.binding()?;
            let deleted = admin
                .delete_acls(std::slice::from_ref(&binding))
                .await
                .context("removing the ACL")?;
            if deleted == 0 {
                anyhow::bail!("no such ACL: {}", line(&binding));
            }
            println!("removed: {}", line(&binding));
        }
        AclCommand::List {
            principal,
            resource,
        } => {
            let (resource_type, resource_name) = resource
                .resource()
                .map_or((String::new(), String::new()), |(t, n)| (t.to_string(), n));
            let filter = AclFilter {
                principal: principal.unwrap_or_default(),
                resource_type,
                resource_name,
            };
            let acls = admin.describe_acls(&filter).await.context("listing ACLs")?;
            if acls.is_empty() {
                println!("no ACLs");
                return Ok(());
            }
            println!(
                "{:<20} {:<6} {:<9} {:<17} {:<9} name",
                "principal", "perm", "operation", "resource_type", "pattern"
            );
            for acl in &acls {
                println!("{}", line(acl));
            }
        }
    }
    Ok(())
}
