//! The pure authorization decision, after Kafka's `AclAuthorizer`:
//!
//! - a deny ACL that matches wins over every allow;
//! - with no matching allow the answer is deny (no ACL = no access);
//! - an ACL matches when its principal is the request's or `User:*`, its pattern names
//!   the resource (literal name, literal `*`, or prefix), and its operation is the
//!   request's or `all`;
//! - implied operations (allow ACLs only, as in Kafka): `describe` is allowed by an
//!   allow for `read`, `write`, `alter` or `delete`; a deny for `read` does not deny
//!   `describe`;
//! - super users are allowed everything, whatever the ACLs say.

use super::model::{Acl, Operation, Permission, ResourceType, ANY_USER};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    Allow,
    Deny,
}

/// Operations an allow ACL for `granted` also allows.
fn allow_covers(granted: Operation, requested: Operation) -> bool {
    granted == requested
        || granted == Operation::All
        || (requested == Operation::Describe
            && matches!(
                granted,
                Operation::Read | Operation::Write | Operation::Alter | Operation::Delete
            ))
}

fn deny_covers(denied: Operation, requested: Operation) -> bool {
    denied == requested || denied == Operation::All
}

/// Whether `principal` may perform `operation` on the named resource.
pub fn authorize<'a>(
    acls: impl IntoIterator<Item = &'a Acl>,
    super_user: bool,
    principal: &str,
    operation: Operation,
    resource_type: ResourceType,
    name: &str,
) -> Decision {
    if super_user {
        return Decision::Allow;
    }
    let mut allowed = false;
    for acl in acls {
        if !(acl.principal == principal || acl.principal == ANY_USER)
            || !acl.pattern.matches(resource_type, name)
        {
            continue;
        }
        match acl.permission {
            Permission::Deny if deny_covers(acl.operation, operation) => return Decision::Deny,
            Permission::Allow if allow_covers(acl.operation, operation) => allowed = true,
            _ => {}
        }
    }
    if allowed {
        Decision::Allow
    } else {
        Decision::Deny
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::super::model::PatternType;
    use super::*;

    fn acl(
        principal: &str,
        resource_type: ResourceType,
        name: &str,
        pattern_type: PatternType,
        operation: Operation,
        permission: Permission,
    ) -> Acl {
        Acl::new(
            principal,
            resource_type,
            name,
            pattern_type,
            operation,
            permission,
        )
        .expect("valid ACL")
    }

    fn decide(acls: &[Acl], principal: &str, operation: Operation, topic: &str) -> Decision {
        authorize(
            acls,
            false,
            principal,
            operation,
            ResourceType::Topic,
            topic,
        )
    }

    #[test]
    fn no_acl_means_no_access() {
        assert_eq!(
            decide(&[], "User:a", Operation::Read, "orders"),
            Decision::Deny
        );
    }

    #[test]
    fn deny_wins_over_allow() {
        use Operation::*;
        let acls = [
            acl(
                "User:*",
                ResourceType::Topic,
                "*",
                PatternType::Literal,
                All,
                Permission::Allow,
            ),
            acl(
                "User:b",
                ResourceType::Topic,
                "orders",
                PatternType::Literal,
                Write,
                Permission::Deny,
            ),
        ];
        assert_eq!(decide(&acls, "User:b", Write, "orders"), Decision::Deny);
        assert_eq!(decide(&acls, "User:b", Read, "orders"), Decision::Allow);
        assert_eq!(decide(&acls, "User:a", Write, "orders"), Decision::Allow);
    }

    #[test]
    fn describe_is_implied_by_read_write_alter_and_delete_but_not_create() {
        use Operation::*;
        for (granted, implied) in [
            (Read, true),
            (Write, true),
            (Alter, true),
            (Delete, true),
            (Create, false),
        ] {
            let acls = [acl(
                "User:a",
                ResourceType::Topic,
                "t",
                PatternType::Literal,
                granted,
                Permission::Allow,
            )];
            assert_eq!(
                decide(&acls, "User:a", Describe, "t") == Decision::Allow,
                implied,
                "{granted}"
            );
        }
        // A deny of read does not deny describe (Kafka: implications apply to allows).
        let acls = [
            acl(
                "User:a",
                ResourceType::Topic,
                "t",
                PatternType::Literal,
                Write,
                Permission::Allow,
            ),
            acl(
                "User:a",
                ResourceType::Topic,
                "t",
                PatternType::Literal,
                Read,
                Permission::Deny,
            ),
        ];
        assert_eq!(decide(&acls, "User:a", Describe, "t"), Decision::Allow);
    }

    #[test]
    fn an_acl_applies_to_its_resource_type_only() {
        let acls = [acl(
            "User:a",
            ResourceType::Group,
            "orders",
            PatternType::Literal,
            Operation::Read,
            Permission::Allow,
        )];
        assert_eq!(
            decide(&acls, "User:a", Operation::Read, "orders"),
            Decision::Deny
        );
    }

    #[test]
    fn super_users_are_always_allowed() {
        let acls = [acl(
            "User:root",
            ResourceType::Topic,
            "*",
            PatternType::Literal,
            Operation::All,
            Permission::Deny,
        )];
        assert_eq!(
            authorize(
                &acls,
                true,
                "User:root",
                Operation::Write,
                ResourceType::Topic,
                "t"
            ),
            Decision::Allow
        );
    }

    fn operation() -> impl Strategy<Value = Operation> {
        prop::sample::select(Operation::ALL)
    }

    fn requested_operation() -> impl Strategy<Value = Operation> {
        prop::sample::select(&Operation::ALL[..Operation::ALL.len() - 1])
    }

    fn name() -> impl Strategy<Value = String> {
        // A small alphabet, so prefixes and equal names happen often.
        "[ab*]{1,3}"
    }

    fn any_acl() -> impl Strategy<Value = Acl> {
        (
            prop::sample::select(vec!["User:a", "User:b", "User:*"]),
            prop::sample::select(ResourceType::ALL),
            name(),
            prop::sample::select(PatternType::ALL),
            operation(),
            prop::sample::select(Permission::ALL),
        )
            .prop_filter_map("valid", |(p, t, n, pt, o, perm)| {
                Acl::new(p, t, &n, pt, o, perm).ok()
            })
    }

    proptest! {
        #[test]
        fn adding_a_deny_never_turns_deny_into_allow(
            acls in prop::collection::vec(any_acl(), 0..8),
            extra in any_acl(),
            principal in prop::sample::select(vec!["User:a", "User:b"]),
            op in requested_operation(),
            resource_type in prop::sample::select(ResourceType::ALL),
            name in name(),
        ) {
            let before = authorize(&acls, false, principal, op, resource_type, &name);
            let mut more = acls.clone();
            more.push(Acl { permission: Permission::Deny, ..extra });
            let after = authorize(&more, false, principal, op, resource_type, &name);
            prop_assert!(!(before == Decision::Deny && after == Decision::Allow));
        }

        #[test]
        fn adding_an_allow_never_turns_allow_into_deny(
            acls in prop::collection::vec(any_acl(), 0..8),
            extra in any_acl(),
            principal in prop::sample::select(vec!["User:a", "User:b"]),
            op in requested_operation(),
            resource_type in prop::sample::select(ResourceType::ALL),
            name in name(),
        ) {
            let before = authorize(&acls, false, principal, op, resource_type, &name);
            let mut more = acls.clone();
            more.push(Acl { permission: Permission::Allow, ..extra });
            let after = authorize(&more, false, principal, op, resource_type, &name);
            prop_assert!(!(before == Decision::Allow && after == Decision::Deny));
        }

        #[test]
        fn a_prefixed_pattern_matches_exactly_the_names_starting_with_it(
            prefix in "[ab]{1,3}",
            name in name(),
        ) {
            let acls = [acl("User:a", ResourceType::Topic, &prefix, PatternType::Prefixed, Operation::Read, Permission::Allow)];
            let allowed = decide(&acls, "User:a", Operation::Read, &name) == Decision::Allow;
            prop_assert_eq!(allowed, name.starts_with(&prefix));
        }

        #[test]
        fn a_literal_pattern_matches_its_name_or_every_name_for_a_star(
            literal in name(),
            name in name(),
        ) {
            let acls = [acl("User:a", ResourceType::Topic, &literal, PatternType::Literal, Operation::Read, Permission::Allow)];
            let allowed = decide(&acls, "User:a", Operation::Read, &name) == Decision::Allow;
            prop_assert_eq!(allowed, literal == "*" || literal == name);
        }

        #[test]
        fn another_principals_acls_change_nothing(
            acls in prop::collection::vec(any_acl(), 0..8),
            op in requested_operation(),
            resource_type in prop::sample::select(ResourceType::ALL),
            name in name(),
        ) {
            let of_a: Vec<Acl> = acls.iter().filter(|acl| acl.principal != "User:b").cloned().collect();
            prop_assert_eq!(
                authorize(&acls, false, "User:a", op, resource_type, &name),
                authorize(&of_a, false, "User:a", op, resource_type, &name)
            );
        }
    }
}
