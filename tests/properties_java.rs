//! server.properties is read as Java reads it, and so as Kafka reads it:
//! the same tricky files (continuations, as Kafka documents a multi-line
//! `sasl.jaas.config`; escapes, an escaped regex in a principal-mapping
//! rule, Unicode escapes, ISO-8859-1 bytes, `:` and whitespace
//! separators, a key alone, repeated keys, CR and CRLF line ends) given to
//! Java's `Properties.load` (the JDK the test command installs) and to
//! Strand's reader give the same keys and values.

use std::collections::BTreeMap;
use std::process::Command;

/// Prints each property (sorted) as `key\tvalue`, every char outside
/// printable ASCII, and `\`, as `\uXXXX`.
const DUMP_JAVA: &str = r#"
import java.io.FileInputStream;
import java.util.Properties;
import java.util.TreeMap;

public class Dump {
    static String esc(String s) {
        StringBuilder b = new StringBuilder();
        for (char c : s.toCharArray()) {
            if (c < 0x20 || c > 0x7e || c == '\\') b.append(String.format("\\u%04x", (int) c));
            else b.append(c);
        }
        return b.toString();
    }
    public static void main(String[] args) throws Exception {
        Properties p = new Properties();
        try (FileInputStream in = new FileInputStream(args[0])) { p.load(in); }
        TreeMap<String, String> sorted = new TreeMap<>();
        for (String k : p.stringPropertyNames()) sorted.put(k, p.getProperty(k));
        for (var e : sorted.entrySet()) System.out.println(esc(e.getKey()) + "\t" + esc(e.getValue()));
    }
}
"#;

fn esc(s: &str) -> String {
    s.encode_utf16()
        .map(|c| {
            if !(0x20..=0x7e).contains(&c) || c == u16::from(b'\\') {
                format!("\\u{c:04x}")
            } else {
                char::from(c as u8).to_string()
            }
        })
        .collect()
}

/// What Java reads, values trimmed as Kafka's ConfigDef trims them.
fn java_reads(dir: &std::path::Path, file: &std::path::Path) -> BTreeMap<String, String> {
    let out = Command::new("java")
        .arg(dir.join("Dump.java"))
        .arg(file)
        .output()
        .expect("java runs (scripts/test.sh installs it)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            let (k, v) = l.split_once('\t').unwrap();
            // Java's String.trim, on the escaped form: spaces and \u00xx
            // controls at either end.
            let mut v = v.to_string();
            loop {
                let before = v.clone();
                v = v.trim_matches(' ').to_string();
                for c in 0..0x20u32 {
                    let e = format!("\\u{c:04x}");
                    v = v.strip_prefix(&e).unwrap_or(&v).to_string();
                    v = v.strip_suffix(&e).unwrap_or(&v).to_string();
                }
                if v == before {
                    break;
                }
            }
            (k.to_string(), v)
        })
        .collect()
}

#[test]
fn tricky_files_read_as_javas_properties_load_reads_them() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("Dump.java"), DUMP_JAVA).unwrap();
    let mut file: Vec<u8> = concat!(
        "# a comment\n",
        "! another\n",
        "plain=value\n",
        "colon:value2\n",
        "spaced   value3\n",
        "  indented.key = indented value  \n",
        "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required \\\n",
        "    username=\"alice\" \\\n",
        "    password=\"alice-secret\";\n",
        "sasl.kerberos.principal.to.local.rules=RULE:[1:$1@$0](.*@EXAMPLE\\\\.COM)s/@.*//,DEFAULT\n",
        "ssl.principal.mapping.rules=RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L,DEFAULT\n",
        "escaped\\ key\\:with\\=separators = x\\ty\\nz\n",
        "unicode=caf\\u00e9 \\u2603\n",
        "windows.path=C:\\\\kafka\\\\data\n",
        "odd.escape=\\q\\w\n",
        "alone\n",
        "empty=\n",
        "dup=first\n",
        "dup=second\n",
        "continued.then.comment=a\\\n",
        "# not a comment here\n",
        "crlf=one\r\n",
        "cr=two\r",
        "last=three",
    )
    .as_bytes()
    .to_vec();
    file.extend_from_slice(b"\nlatin1=caf\xe9\n");
    let path = dir.path().join("tricky.properties");
    std::fs::write(&path, &file).unwrap();

    let java = java_reads(dir.path(), &path);
    let strand: BTreeMap<String, String> = strand_broker::config::parse_properties("tricky", &file)
        .unwrap()
        .into_iter()
        .map(|(k, v)| (esc(&k), esc(&v)))
        .collect();
    assert_eq!(java.len(), 19, "{java:?}");
    assert_eq!(strand, java);
    // What the cases are for, spelled out.
    assert_eq!(
        java["sasl.jaas.config"],
        "org.apache.kafka.common.security.plain.PlainLoginModule required username=\"alice\" password=\"alice-secret\";"
    );
    assert_eq!(java["latin1"], "caf\\u00e9");
    assert_eq!(java["alone"], "");
}
