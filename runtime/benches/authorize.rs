//! What an authorization check costs the produce path (issue 29): a cached decision
//! (hash lookups by the principal, resource type and operation, and the topic name)
//! against the scan of every ACL it replaces, with 1 000 ACLs stored. The produce path
//! pays the cached one once per topic of a request.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion};
use idem_runtime::acl::{
    authorize, Acl, Authorizer, AuthorizerKind, Operation, PatternType, Permission, ResourceType,
};

const ACLS: usize = 1_000;

fn acls() -> Vec<Acl> {
    (0..ACLS)
        .map(|i| {
            Acl::new(
                &format!("User:u{}", i % 50),
                ResourceType::Topic,
                &format!("topic-{i}"),
                if i % 2 == 0 {
                    PatternType::Literal
                } else {
                    PatternType::Prefixed
                },
                Operation::Write,
                Permission::Allow,
            )
            .expect("valid ACL")
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let acls = acls();
    let authorizer = Authorizer::new(AuthorizerKind::Acl, []);
    authorizer.replace_acls(acls.clone());
    let mut group = c.benchmark_group("authorize_produce");
    group.bench_function("cached decision", |b| {
        b.iter(|| {
            authorizer.decide(
                black_box("User:u7"),
                Operation::Write,
                ResourceType::Topic,
                black_box("topic-507"),
            )
        })
    });
    group.bench_function("scan of 1000 ACLs", |b| {
        b.iter(|| {
            authorize(
                &acls,
                false,
                black_box("User:u7"),
                Operation::Write,
                ResourceType::Topic,
                black_box("topic-507"),
            )
        })
    });
    let open = Authorizer::open();
    group.bench_function("open (no authorizer)", |b| {
        b.iter(|| {
            open.decide(
                black_box("User:u7"),
                Operation::Write,
                ResourceType::Topic,
                black_box("topic-507"),
            )
        })
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
