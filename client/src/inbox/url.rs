//! What the Inbox reads from a database URL: which backend, a form safe to print (no
//! password), and, for SQLite, the file created when missing (sqlx opens an existing
//! file only unless told `mode=rwc`).

use super::error::InboxError;
use super::schema::Backend;

/// The backend a URL names, by its scheme.
pub fn backend(url: &str) -> Result<Backend, InboxError> {
    let scheme = url.split_once("://").map(|(s, _)| s.to_ascii_lowercase());
    match scheme.as_deref() {
        Some("postgres" | "postgresql") => Ok(Backend::Postgres),
        Some("sqlite") => Ok(Backend::Sqlite),
        _ => Err(InboxError::UnsupportedUrl { url: redact(url) }),
    }
}

/// `url` with the password of its user info replaced by `***`.
pub fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let authority_end = rest.find('/').unwrap_or(rest.len());
    let (authority, path) = rest.split_at(authority_end);
    match authority.rsplit_once('@') {
        Some((user_info, host)) => match user_info.split_once(':') {
            Some((user, _password)) => format!("{scheme}://{user}:***@{host}{path}"),
            None => url.to_string(),
        },
        None => url.to_string(),
    }
}

/// The URL sqlx is given: a SQLite file is created when missing unless the URL says
/// otherwise (`mode=…`).
pub fn connect_url(url: &str, backend: Backend) -> String {
    if backend != Backend::Sqlite || url.contains("mode=") {
        return url.to_string();
    }
    let separator = if url.contains('?') { '&' } else { '?' };
    format!("{url}{separator}mode=rwc")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn given_schemes_then_backends() {
        assert_eq!(backend("postgres://u@h/db").ok(), Some(Backend::Postgres));
        assert_eq!(backend("postgresql://h/db").ok(), Some(Backend::Postgres));
        assert_eq!(backend("sqlite:///tmp/x.db").ok(), Some(Backend::Sqlite));
        assert!(matches!(
            backend("mysql://h/db"),
            Err(InboxError::UnsupportedUrl { .. })
        ));
        assert!(backend("not a url").is_err());
    }

    #[test]
    fn given_a_password_then_it_is_not_printed() {
        assert_eq!(
            redact("postgres://bob:secret@db:5432/x"),
            "postgres://bob:***@db:5432/x"
        );
        assert_eq!(redact("postgres://db/x"), "postgres://db/x");
    }

    #[test]
    fn given_sqlite_without_mode_then_the_file_is_created() {
        assert_eq!(
            connect_url("sqlite:///tmp/a.db", Backend::Sqlite),
            "sqlite:///tmp/a.db?mode=rwc"
        );
        assert_eq!(
            connect_url("sqlite:///tmp/a.db?mode=ro", Backend::Sqlite),
            "sqlite:///tmp/a.db?mode=ro"
        );
        assert_eq!(
            connect_url("postgres://h/db", Backend::Postgres),
            "postgres://h/db"
        );
    }
}
