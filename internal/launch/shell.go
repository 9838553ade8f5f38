package launch

import (
	"fmt"
	"strings"
)

// Quote writes s as one POSIX shell word, quoting it only when it needs quoting.
func Quote(s string) string {
	safe := s != ""
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./:=@%+,", r)) {
			safe = false
			break
		}
	}
	if safe {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// tomlString quotes s as a TOML basic string.
func tomlString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, "\\u%04X", r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// Shell is the setup as shell lines: the exports, then the command. A variable set to itself
// ("$LILY_API_KEY" for LILY_API_KEY) is already in the shell and left out.
func (s Setup) Shell() string {
	var b strings.Builder
	for _, v := range s.Env {
		word := v.Shell
		if word == "" {
			word = Quote(v.Value)
		}
		if word == `"$`+v.Name+`"` {
			continue
		}
		if v.Why != "" {
			fmt.Fprintf(&b, "# %s:\n", v.Why)
		}
		fmt.Fprintf(&b, "export %s=%s\n", v.Name, word)
	}
	b.WriteString(commandLine(s.Client.Name, s.Args))
	return b.String()
}

// maxLine is where a command line breaks before its options, one option with its value a line.
const maxLine = 100

func commandLine(name string, args []string) string {
	words := []string{Quote(name)}
	for _, a := range args {
		words = append(words, Quote(a))
	}
	if line := strings.Join(words, " "); len(line) <= maxLine {
		return line + "\n"
	}
	var b strings.Builder
	b.WriteString(words[0])
	for i, w := range words[1:] {
		if i > 0 && strings.HasPrefix(args[i], "-") {
			b.WriteString(" \\\n ")
		}
		b.WriteString(" " + w)
	}
	return b.String() + "\n"
}
