# Sourced by .ci/sqlx-prepare and .ci/run: `schema_start` migrates a database for the store's
# queries to be checked against and sets `schema_url`; `schema_stop` removes it. The database is
# a private PostgreSQL in a temporary directory, or one of its own on DATABASE_URL's server
# when that is set. The schema is migrated by sqlx-cli (installed at the version of sqlx in
# Cargo.lock when missing), not by `wattledger migrate`: that binary is built from the very
# queries whose records may be stale.

schema_start() {
  local version
  version=$(awk '/^name = "sqlx"$/ { getline; gsub(/[^0-9.]/, ""); print; exit }' Cargo.lock)
  if [ "$(cargo sqlx --version 2>/dev/null | awk '{print $2}')" != "$version" ]; then
    echo "== installing sqlx-cli $version (cargo install)"
    # Not linted: it is not ours (CI lints the workspace through this variable).
    env -u RUSTC_WORKSPACE_WRAPPER cargo install -q sqlx-cli --version "$version" --locked \
      --no-default-features --features postgres,rustls
  fi
  if [ -n "${DATABASE_URL:-}" ]; then
    schema_url="${DATABASE_URL%/*}/wattledger_sqlx_prepare"
    psql -q "$DATABASE_URL" -c "DROP DATABASE IF EXISTS wattledger_sqlx_prepare WITH (FORCE)"
  else
    _schema_bin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
    _schema_as=()
    # World-readable, so that the server (run as the postgres user under root) can enter it.
    _schema_dir=$(mktemp -d /tmp/wattledger-sqlx.XXXXXX) && chmod 755 "$_schema_dir"
    if [ "$(id -u)" = 0 ]; then
      _schema_as=(runuser -u postgres --)
      chown postgres "$_schema_dir"
    fi
    "${_schema_as[@]}" "$_schema_bin/initdb" -D "$_schema_dir/pg" -U wattledger --auth=trust \
      -E UTF8 --no-locale >/dev/null
    local port
    port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    "${_schema_as[@]}" "$_schema_bin/pg_ctl" -D "$_schema_dir/pg" -l "$_schema_dir/pg.log" -w \
      -o "-p $port -k $_schema_dir/pg -c listen_addresses=127.0.0.1" start >/dev/null
    schema_url="postgres://wattledger@127.0.0.1:$port/wattledger"
  fi
  cargo sqlx database create --database-url "$schema_url"
  cargo sqlx migrate run --source migrations --database-url "$schema_url" >/dev/null
}

schema_stop() {
  [ -n "${_schema_dir:-}" ] || return 0
  "${_schema_as[@]}" "$_schema_bin/pg_ctl" -D "$_schema_dir/pg" -m fast stop >/dev/null 2>&1 || true
  rm -rf "$_schema_dir"
  _schema_dir=""
}

# What the query macros recorded (SQLX_OFFLINE_DIR) against .sqlx/: fails when they differ.
schema_compare() {
  if ! diff -r .sqlx "$1" >&2; then
    echo ".sqlx/ does not match the store's queries: run 'bash .ci/sqlx-prepare' and commit .sqlx/" >&2
    return 1
  fi
  echo "   $(ls "$1" | wc -l) queries, as recorded in .sqlx/"
}
