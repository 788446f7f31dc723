// Package apikey owns the format of Sluice API keys: generating
// `sk-sluice-…` secrets and key ids, hashing a secret (SHA-256, the only form
// ever stored) and its public prefix (the only part ever logged), and
// extracting a presented credential from request headers. A credential it
// cannot extract is an *apierr.Error: 401 with apierr's
// missing_credential, malformed_credential or conflicting_credentials code.
//
// It must not touch storage or policy: whether a key exists, is revoked or
// may call a model is decided elsewhere (keyring, authz). Nothing here logs,
// and no error message it builds contains any part of a presented secret.
package apikey
