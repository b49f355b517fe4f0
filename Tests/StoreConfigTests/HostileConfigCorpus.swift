@testable import StoreConfig

/// The secret every case of the hostile corpus hides somewhere; it must appear in no error.
let corpusSecret = "hunter2"

private func cloud(_ lines: String, path: String = "a.sqlite") -> String {
    "version: 1\nstores:\n  notes:\n    path: \(path)\n    cloud:\n      container: iCloud.com.example.notes\n" + lines
}

/// Configs written by a hostile or careless user: secrets next to errors, connection strings of every form,
/// control characters, numbers out of range, `~` paths. Each entry asserts the exact first line of the error.
let hostileCorpus: [MalformedCase] = [
    // Secrets next to an error: the excerpt and the message never show them.
    MalformedCase(name: "61-flow-secret-with-an-error", text: """
        version: 1
        stores:
          notes:
            path: a.sqlite
            cloud: {container: iCloud.com.example.notes, url: file:c.container, secret: hunter2, zone: [x]}
        """, expected: "config.yaml:5:96: error: stores.notes.cloud.zone: expected a zone name, got a list"),
    MalformedCase(name: "62-flow-secret-over-two-lines", text: """
        version: 1
        stores:
          notes:
            path: a.sqlite
            cloud: {container: iCloud.com.example.notes,
                    secret: hunter2, url: file:c.container, zone: [x]}
        """, expected: "config.yaml:6:59: error: stores.notes.cloud.zone: expected a zone name, got a list"),
    MalformedCase(name: "63-block-secret-with-a-syntax-error", text: cloud("""
              url: file:c.container
              secret: hunter2: more
        """), expected: "config.yaml:8:22: error: invalid YAML: mapping values are not allowed in this context"),
    MalformedCase(name: "64-quoted-secret-key-in-flow", text: """
        version: 1
        stores:
          notes:
            path: a.sqlite
            cloud: {"secret": 'hunter2, still', container: iCloud.com.example.notes, url: file:c.container, mode: x}
        """, expected: "config.yaml:5:101: error: stores.notes.cloud.mode: unknown key"),
    MalformedCase(name: "65-secret-without-a-space", text: """
        version: 1
        stores:
          notes:
            path: a.sqlite
            cloud: secret:hunter2
        """, expected: "config.yaml:5:12: error: stores.notes.cloud: expected a mapping, got '<redacted>'"),
    MalformedCase(name: "66-secret-given-twice", text: cloud("""
              url: file:c.container
              secret: hunter1
              secret: hunter2
        """), expected: "config.yaml:9:7: error: stores.notes.cloud.secret: duplicate key, first set at line 8"),
    MalformedCase(name: "67-secret-as-a-list", text: cloud("""
              url: file:c.container
              secret: [hunter2]
        """), expected: "config.yaml:8:15: error: stores.notes.cloud.secret: expected text, got a list"),
    MalformedCase(name: "68-block-scalar-secret-then-an-error", text: cloud("""
              url: file:c.container
              secret: >
                hunter2
              zone: {x: y}
        """), expected: "config.yaml:10:13: error: stores.notes.cloud.zone: expected a zone name, got a mapping"),

    // PostgreSQL URIs: checked when the config is read, never echoed with their password.
    MalformedCase(name: "69-uri-port-out-of-range", text: cloud("      url: postgres://alice:hunter2@db:99999/notes\n"),
                  expected: "config.yaml:7:12: error: stores.notes.cloud.url: '99999' is not a port number (1 to 65535)"),
    MalformedCase(name: "70-uri-port-not-a-number", text: cloud("      url: postgres://alice:hunter2@db:pg/notes\n"),
                  expected: "config.yaml:7:12: error: stores.notes.cloud.url: 'pg' is not a port number (1 to 65535)"),
    MalformedCase(name: "71-uri-unknown-parameter", text: cloud("      url: postgres://db/notes?password=hunter2&sslmod=require\n"),
                  expected: "config.yaml:7:12: error: stores.notes.cloud.url: 'sslmod' is not a PostgreSQL connection setting"),
    MalformedCase(name: "72-uri-bad-sslmode", text: cloud("      url: postgresql://alice:hunter2@db/notes?sslmode=always\n"),
                  expected: "config.yaml:7:12: error: stores.notes.cloud.url: sslmode must be one of disable, allow, prefer, require, verify-ca, verify-full, got 'always'"),
    MalformedCase(name: "73-uri-timeout-not-a-number", text: cloud("      url: postgres://db/notes?connect_timeout=soon\n"),
                  expected: "config.yaml:7:12: error: stores.notes.cloud.url: connect_timeout must be a whole number, got 'soon'"),
    MalformedCase(name: "74-uri-parameter-without-value", text: cloud("      url: postgres://db/notes?sslmode\n"),
                  expected: "config.yaml:7:12: error: stores.notes.cloud.url: the URI parameter 'sslmode' has no '=' and value"),
    MalformedCase(name: "75-uri-malformed-escape-in-database", text: cloud("      url: postgres://db/no%zztes\n"),
                  expected: "config.yaml:7:12: error: stores.notes.cloud.url: the database name in the URI has a malformed %-escape"),
    MalformedCase(name: "76-uri-malformed-escape-in-password", text: cloud("      url: postgres://alice:hunter2%zz@db/notes\n"),
                  expected: "config.yaml:7:12: error: stores.notes.cloud.url: the user name or password in the URI has a malformed %-escape"),
    MalformedCase(name: "77-uri-ipv6-without-bracket", text: cloud("      url: postgres://[::1/notes\n"),
                  expected: "config.yaml:7:12: error: stores.notes.cloud.url: the IPv6 address '[::1' in the URI has no closing ']'"),
    MalformedCase(name: "78-uri-empty", text: cloud("      url: postgres://\n"),
                  expected: "config.yaml:7:12: error: stores.notes.cloud.url: the URI has no host or database"),
    MalformedCase(name: "79-uri-two-colons", text: cloud("      url: postgres://db:5432:1/notes\n"),
                  expected: "config.yaml:7:12: error: stores.notes.cloud.url: the host 'db:5432:1' has more than one ':'"),
    MalformedCase(name: "80-uri-ssl-not-true", text: cloud("      url: postgres://db/notes?ssl=yes\n"),
                  expected: "config.yaml:7:12: error: stores.notes.cloud.url: the URI parameter ssl must be 'true', got 'yes'"),
    MalformedCase(name: "81-unsupported-scheme-with-password", text: cloud("      url: mysql://root:hunter2@db/notes\n"),
                  expected: "config.yaml:7:12: error: stores.notes.cloud.url: unsupported URL scheme 'mysql'"),
    MalformedCase(name: "82-url-from-a-variable", text: cloud("      url: ${PG_URL}\n"),
                  expected: "config.yaml:7:12: error: stores.notes.cloud.url: '0' is not a port number (1 to 65535)",
                  environment: ["PG_URL": "postgres://alice:hunter2@db:0/notes"]),

    // libpq keyword=value settings.
    MalformedCase(name: "83-settings-bad-sslmode", text: cloud("      url: host=db password=hunter2 sslmode=requir\n"),
                  expected: "config.yaml:7:12: error: stores.notes.cloud.url: sslmode must be one of disable, allow, prefer, require, verify-ca, verify-full, got 'requir'"),
    MalformedCase(name: "84-settings-unterminated-quote", text: cloud("      url: \"host=db password='hunter2 dbname=notes\"\n"),
                  expected: "config.yaml:7:12: error: stores.notes.cloud.url: unterminated quoted value for \"password\" in the connection string"),
    MalformedCase(name: "85-settings-word-without-equals", text: cloud("      url: host=db password=hunter hunter2\n"),
                  expected: "config.yaml:7:12: error: stores.notes.cloud.url: a word without \"=\" after the password setting of the connection string"),
    MalformedCase(name: "86-settings-unknown-keyword", text: cloud("      url: host=db dbnme=notes password=hunter2\n"),
                  expected: "config.yaml:7:12: error: stores.notes.cloud.url: 'dbnme' is not a PostgreSQL connection setting"),
    MalformedCase(name: "87-settings-bad-port", text: cloud("      url: host=db port=abc sslpassword=hunter2\n"),
                  expected: "config.yaml:7:12: error: stores.notes.cloud.url: 'abc' is not a port number (1 to 65535)"),
    MalformedCase(name: "88-settings-stray-word", text: cloud("      url: host=db notes\n"),
                  expected: "config.yaml:7:12: error: stores.notes.cloud.url: a word without \"=\" after the host setting of the connection string"),
    MalformedCase(name: "89-settings-bad-timeout", text: cloud("      url: host=db connect_timeout=ten password=hunter2\n"),
                  expected: "config.yaml:7:12: error: stores.notes.cloud.url: connect_timeout must be a whole number, got 'ten'"),

    // Account ids: the rule the container applies, checked where the config is read.
    MalformedCase(name: "90-account-with-a-space", text: cloud("      url: file:c.container\n      account: 'a b'\n"),
                  expected: "config.yaml:8:16: error: stores.notes.cloud.account: 'a b' is not a valid account id: it holds a space"),
    MalformedCase(name: "91-account-from-a-variable", text: cloud("      url: file:c.container\n      account: ${ACCOUNT}\n"),
                  expected: "config.yaml:8:16: error: stores.notes.cloud.account: 'bad id' is not a valid account id: it holds a space",
                  environment: ["ACCOUNT": "bad id"]),
    MalformedCase(name: "92-account-too-long", text: cloud("      url: file:c.container\n      account: \(String(repeating: "a", count: 201))\n"),
                  expected: "config.yaml:8:16: error: stores.notes.cloud.account: the account id is 201 characters long; the limit is 200"),

    // Control characters: refused in every name and path, whether written or from a variable.
    MalformedCase(name: "93-nul-in-path", text: "version: 1\nstores:\n  notes:\n    path: \"data/no\\0tes.sqlite\"\n",
                  expected: "config.yaml:4:11: error: stores.notes.path: the value holds the control character U+0000 (NUL) at character 8"),
    MalformedCase(name: "94-nul-in-file-url", text: cloud("      url: \"file:cloud/no\\0tes.container\"\n"),
                  expected: "config.yaml:7:12: error: stores.notes.cloud.url: the value holds the control character U+0000 (NUL) at character 14"),
    MalformedCase(name: "95-escaped-nul-in-file-url", text: cloud("      url: file:cloud/no%00tes.container\n"),
                  expected: "config.yaml:7:12: error: stores.notes.cloud.url: the value holds the control character U+0000 (NUL) at character 9"),
    MalformedCase(name: "96-line-break-from-a-variable", text: "version: 1\nstores:\n  notes:\n    path: ${DIR}/notes.sqlite\n",
                  expected: "config.yaml:4:11: error: stores.notes.path: the value from the environment variable holds the control character U+000A (line break) at character 5",
                  environment: ["DIR": "data\nevil"]),
    MalformedCase(name: "97-escape-in-zone", text: cloud("      url: file:c.container\n      zone: \"\\e[31mred\"\n"),
                  expected: "config.yaml:8:13: error: stores.notes.cloud.zone: the value holds the control character U+001B (escape) at character 1"),
    MalformedCase(name: "98-tab-in-author", text: "version: 1\nstores:\n  notes:\n    path: a.sqlite\n    history: {author: \"a\\tb\"}\n",
                  expected: "config.yaml:5:23: error: stores.notes.history.author: the value holds the control character U+0009 (tab) at character 2"),
    MalformedCase(name: "99-nul-in-a-column-name", text: """
        version: 1
        stores:
          notes:
            path: a.sqlite
            entities:
              notes:
                unique: ["uu\\0id"]
        """, expected: "config.yaml:7:18: error: stores.notes.entities.notes.unique[0]: the value holds the control character U+0000 (NUL) at character 3"),
    MalformedCase(name: "100-c1-control-in-schema", text: "version: 1\nstores:\n  notes:\n    path: a.sqlite\n    schema: \"s\\x85.sql\"\n",
                  expected: "config.yaml:5:13: error: stores.notes.schema: the value holds the control character U+0085 at character 2"),
    MalformedCase(name: "101-malformed-escape-in-file-url", text: cloud("      url: file:cloud/100%.container\n"),
                  expected: "config.yaml:7:12: error: stores.notes.cloud.url: the file: URL has a malformed %-escape"),
    MalformedCase(name: "102-newline-in-seed-name", text: "version: 1\nstores:\n  notes:\n    path: a.sqlite\n    seed:\n      name: \"v1\\nv2\"\n",
                  expected: "config.yaml:6:13: error: stores.notes.seed.name: the value holds the control character U+000A (line break) at character 3"),

    // Numbers out of range.
    MalformedCase(name: "103-retention-beyond-100-years", text: "version: 1\nstores:\n  notes:\n    path: a.sqlite\n    history:\n      retention: 200000000000d\n",
                  expected: "config.yaml:6:18: error: stores.notes.history.retention: expected a duration like 30d, 12h or 15m, got '200000000000d'"),
    MalformedCase(name: "104-retention-negative", text: "version: 1\nstores:\n  notes:\n    path: a.sqlite\n    history:\n      retention: -5d\n",
                  expected: "config.yaml:6:18: error: stores.notes.history.retention: expected a duration like 30d, 12h or 15m, got '-5d'"),
    MalformedCase(name: "105-retention-exponent", text: "version: 1\nstores:\n  notes:\n    path: a.sqlite\n    history:\n      retention: 1e300d\n",
                  expected: "config.yaml:6:18: error: stores.notes.history.retention: expected a duration like 30d, 12h or 15m, got '1e300d'"),
    MalformedCase(name: "106-retention-infinite", text: "version: 1\nstores:\n  notes:\n    path: a.sqlite\n    history:\n      retention: infd\n",
                  expected: "config.yaml:6:18: error: stores.notes.history.retention: expected a duration like 30d, 12h or 15m, got 'infd'"),
    MalformedCase(name: "107-delete-fraction-nan", text: cloud("      url: file:c.container\n      max_delete_fraction: nan\n"),
                  expected: "config.yaml:8:28: error: stores.notes.cloud.max_delete_fraction: expected a number between 0 and 1, got 'nan'"),
    MalformedCase(name: "108-delete-fraction-huge", text: cloud("      url: file:c.container\n      max_delete_fraction: 1e400\n"),
                  expected: "config.yaml:8:28: error: stores.notes.cloud.max_delete_fraction: expected a number between 0 and 1, got '1e400'"),
    MalformedCase(name: "109a-record-size-below-1KiB", text: cloud("      url: file:c.container\n      max_record_size: 10\n"),
                  expected: "config.yaml:8:24: error: stores.notes.cloud.max_record_size: expected a size from 1KiB to 1GiB (bytes, or with KB, MB, KiB or MiB), got '10'"),
    MalformedCase(name: "109b-record-size-above-1GiB", text: cloud("      url: file:c.container\n      max_record_size: 2GiB\n"),
                  expected: "config.yaml:8:24: error: stores.notes.cloud.max_record_size: expected a size from 1KiB to 1GiB (bytes, or with KB, MB, KiB or MiB), got '2GiB'"),
    MalformedCase(name: "109c-record-size-negative", text: cloud("      url: file:c.container\n      max_record_size: -1\n"),
                  expected: "config.yaml:8:24: error: stores.notes.cloud.max_record_size: expected a size from 1KiB to 1GiB (bytes, or with KB, MB, KiB or MiB), got '-1'"),
    MalformedCase(name: "109-version-beyond-int", text: "version: 99999999999999999999\nstores:\n  notes:\n    path: a.sqlite\n",
                  expected: "config.yaml:1:10: error: version: expected an integer, got '99999999999999999999'"),

    // `~` paths.
    MalformedCase(name: "110-tilde-user-path", text: "version: 1\nstores:\n  notes:\n    path: ~bob/notes.sqlite\n",
                  expected: "config.yaml:4:11: error: stores.notes.path: '~user' paths are not supported"),
    MalformedCase(name: "111-tilde-without-home", text: "version: 1\nstores:\n  notes:\n    path: ~/notes.sqlite\n",
                  expected: "config.yaml:4:11: error: stores.notes.path: cannot expand '~': HOME is not set"),
    MalformedCase(name: "112-tilde-user-in-file-url", text: cloud("      url: file:~bob/c.container\n"),
                  expected: "config.yaml:7:12: error: stores.notes.cloud.url: '~user' paths are not supported"),
]
