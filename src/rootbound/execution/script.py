"""What a `shell` script would run, read with tree-sitter-bash, so each program can be checked before `/bin/sh` runs it.

Two modes:

* `strict` (the allowlist is restricted): the script must stay inside a POSIX sh
  subset whose every command can be seen. Anything the checker cannot verify is
  refused: a computed command name (`$x`, `$(...)`, globs), `eval`/`exec`/`source`
  and other builtins that run code, function definitions, bash-only syntax whose
  meaning differs under `/bin/sh` (`$'...'`, `&>`, `|&`, `[[`, `((`, arrays,
  `${x:1}`, process substitution), assignments to `PATH`/loader variables, and
  redirections to or from files (the shell itself would open them, outside any
  check). Because a parser can disagree with the real shell, every `$(`, backtick
  and comment found in the raw text must also match the parse tree.
* lenient (`*` with blocked patterns): best effort, only collects the commands it
  can see for the blocked-pattern tripwire.

Shell builtins that can neither run a program nor change how one is found
(`cd`, `echo`, `printf`, `test`, `true`, ...) need no allowlist entry.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from rootbound.errors import Denied
from rootbound.execution.words import literal_word

if TYPE_CHECKING:  # the parser itself is loaded by the first script checked: a server that runs none never pays
    from tree_sitter import Node, Parser

__all__ = ["FREE_BUILTINS", "ScriptCommand", "ScriptReport", "Unverifiable", "analyze"]

FREE_BUILTINS = frozenset({
    "cd", ":", "true", "false", "test", "[", "echo", "printf", "pwd", "shift", "exit", "return", "break",
    "continue", "set", "read", "wait", "getopts", "umask", "export", "readonly", "local", "unset",
})
RUNS_CODE = frozenset({
    "eval", "exec", "source", ".", "command", "builtin", "trap", "alias", "enable", "hash", "fc", "coproc", "let",
    "declare", "typeset", "mapfile", "readarray", "shopt", "bind", "complete", "compgen", "caller", "fg", "bg",
    "disown", "suspend",
})
_STRUCTURE = frozenset({
    "program", "list", "pipeline", "subshell", "compound_statement", "redirected_statement", "negated_command",
    "if_statement", "elif_clause", "else_clause", "while_statement", "do_group", "case_statement", "case_item",
    "concatenation", "word", "string", "string_content", "number", "simple_expansion", "variable_name",
    "special_variable_name", "heredoc_start", "heredoc_body", "heredoc_content", "heredoc_end", "file_descriptor",
    "unary_expression", "binary_expression", "parenthesized_expression", "test_operator", "regex", "extglob_pattern",
})
_BASH_ONLY = {
    "ansi_c_string": "$'...' quoting (bash-only; /bin/sh reads it differently)",
    "translated_string": '$"..." quoting (bash-only)',
    "brace_expression": "brace expansion {a..b} (bash-only)",
    "array": "arrays (bash-only)",
    "subscript": "array subscripts (bash-only; they evaluate code)",
    "process_substitution": "process substitution <(...) (bash-only)",
    "function_definition": "function definitions (calls to them cannot be checked)",
    "c_style_for_statement": "for ((...)) loops (bash-only)",
    "postfix_expression": "arithmetic on variables",
    "ternary_expression": "arithmetic outside $((...))",
    "herestring_redirect": "here-strings <<< (bash-only)",
}
_REFUSED_TOKENS = {
    "&>": "&> redirection (bash-only; /bin/sh runs the rest as a separate background command)",
    "&>>": "&>> redirection (bash-only)",
    "|&": "|& pipes (bash-only)",
    "<<<": "here-strings <<< (bash-only)",
    "((": "(( )) arithmetic commands (bash-only)",
    "[[": "[[ ]] tests (bash-only; use [ ])",
    "function": "function definitions",
    "select": "select loops (bash-only)",
    "$[": "$[ ] arithmetic (bash-only)",
    "$`": "unsupported substitution",
    ";&": "case fall-through ;& (bash-only)",
    ";;&": "case fall-through ;;& (bash-only)",
    "=~": "regex tests (bash-only)",
}
_ARITHMETIC = frozenset({"number", "binary_expression", "unary_expression", "parenthesized_expression"})
# POSIX parameter expansions only: ${x}, ${#x}, ${x:-w}, ${x=w}, ${x%p}, ${x##p}, ... (bash adds ${!x}, ${x:1}, ...).
_POSIX_EXPANSION = re.compile(r"\$\{#?(?:[A-Za-z_][A-Za-z0-9_]*|[0-9]+|[@*#?$!-])(?:(?::?[-=?+]|%%?|##?).*)?\}\Z",
                              re.DOTALL)
_COMMENT_BEFORE = frozenset(b" \t\n;&|()")


class Unverifiable(Denied):
    """The script holds something the checker cannot verify while the allowlist is restricted."""


@dataclass(frozen=True)
class ScriptCommand:
    name: str  # as the shell will look it up (quotes removed)
    words: tuple[str | None, ...]  # argv; None where the value is only known when the script runs
    builtin: bool


@dataclass
class ScriptReport:
    commands: list[ScriptCommand] = field(default_factory=list)
    changes_directory: bool = False


RefuseVar = Callable[[str], "str | None"]


def _refused(what: str) -> Unverifiable:
    return Unverifiable(f"the shell script cannot be checked against the command allowlist: {what}. Nothing was run; "
                        "rewrite it with plain commands, or use execute_command")


class _Checker:
    def __init__(self, source: bytes, strict: bool, refuse_var: RefuseVar) -> None:
        self.src = source
        self.strict = strict
        self.refuse_var = refuse_var
        self.report = ScriptReport()
        self.subst_starts: set[int] = set()  # offsets of `$(`, `$((` and backticks the parse tree accounts for
        self.literal: list[tuple[int, int]] = []  # spans a shell reads literally (quotes, comments, quoted heredocs)
        self.strings: list[tuple[int, int]] = []  # double-quoted text: literal for `<(`, not for `$(`
        self.backticks: list[tuple[int, int]] = []
        self.heredoc_bodies: list[tuple[int, int]] = []  # unquoted bodies: /bin/sh joins continued lines there

    def text(self, node: Node) -> str:
        return self.src[node.start_byte:node.end_byte].decode("utf-8", "replace")

    def fail(self, what: str, node: Node | None = None) -> None:
        if self.strict:
            snippet = f" (at {self.text(node)[:60]!r})" if node is not None else ""
            raise _refused(what + snippet)

    # -- the walk ---------------------------------------------------------------------------

    def walk(self, node: Node) -> None:
        kind = node.type
        if not node.is_named:
            if kind in _REFUSED_TOKENS:
                self.fail(_REFUSED_TOKENS[kind], node.parent)
            return
        if not self.strict:
            if kind == "command":
                self.command(node)
            for child in node.children:
                self.walk(child)
            return
        handler = _HANDLERS.get(kind)
        if handler is not None:
            handler(self, node)
        elif kind in _STRUCTURE:
            self.children(node)
        elif kind in _BASH_ONLY:
            self.fail(_BASH_ONLY[kind], node)
        else:
            self.fail(f"unsupported construct ({kind})", node)

    def children(self, node: Node) -> None:
        for child in node.children:
            self.walk(child)

    def command(self, node: Node) -> None:
        name_node = node.child_by_field_name("name")
        args: list[Node] = []
        for i, child in enumerate(node.children):
            fname = node.field_name_for_child(i)
            if fname == "argument":
                args.append(child)
            if self.strict:
                if child.type == "variable_assignment":
                    self.assignment(child)
                else:
                    self.walk(child)
        if name_node is None:
            return
        name = literal_word(self.text(name_node))
        if name is None:
            self.fail("a command name computed when the script runs (variable, substitution, glob or ~)", name_node)
            return
        words = (name, *(literal_word(self.text(a)) for a in args))
        builtin = "/" not in name and (name in FREE_BUILTINS or name in RUNS_CODE)
        if self.strict and "/" not in name:
            self.builtin_rules(name, words, node)
        self.report.commands.append(ScriptCommand(name, words, builtin))

    def builtin_rules(self, name: str, words: tuple[str | None, ...], node: Node) -> None:
        args = words[1:]
        if name in RUNS_CODE:
            self.fail(f"{name} runs code the checker cannot see", node)
        elif name == "cd":
            self.report.changes_directory = True
        elif name in ("test", "[") and "-v" in args:
            self.fail("test -v (bash evaluates array subscripts in it)", node)
        elif name == "printf" and "-v" in args:
            self.fail("printf -v (bash-only)", node)
        elif name in ("read", "getopts", "wait", "export", "readonly", "local", "unset"):
            for arg in args:
                if arg in ("-v", "-f") and name == "unset":
                    continue
                if arg is None or "[" in arg or (arg.startswith("-") and name in ("export", "readonly", "local")):
                    self.fail(f"{name} with a computed, array or option argument", node)
                    continue
                var = arg.split("=", 1)[0]
                if name in ("read", "getopts", "wait", "unset") or "=" in arg:
                    self.variable(var, node)

    def variable(self, name: str, node: Node) -> None:
        reason = self.refuse_var(name)
        if reason:
            self.fail(f"it assigns {name} ({reason})", node)

    def assignment(self, node: Node) -> None:
        target = node.child_by_field_name("name")
        if target is None or target.type != "variable_name":
            self.fail("array or computed assignments", node)
        else:
            self.variable(self.text(target), node)
        for child in node.children:
            if target is None or child.id != target.id:
                self.walk(child)

    def declaration(self, node: Node) -> None:
        keyword = node.children[0].type if node.children else ""
        if keyword not in ("export", "readonly", "local"):
            self.fail(f"{keyword} (bash attributes can evaluate code)", node)
        for child in node.children[1:]:
            if child.type == "variable_assignment":
                self.assignment(child)
            elif child.type == "word" and (self.text(child).startswith("-") or "[" in self.text(child)):
                self.fail(f"options or arrays in {keyword}", node)
            elif child.type != "variable_name":
                self.walk(child)

    def unset(self, node: Node) -> None:
        for child in node.children[1:]:
            text = self.text(child)
            if child.type == "variable_name":
                self.variable(text, node)
            elif child.type == "word" and text in ("-v", "-f"):
                continue
            elif child.is_named:
                self.fail("unset of a computed or array name", node)

    def for_loop(self, node: Node) -> None:
        var = node.child_by_field_name("variable")
        if var is not None:
            self.variable(self.text(var), node)
        self.children(node)

    def test(self, node: Node) -> None:
        if self.text(node).startswith("[["):
            self.fail(_REFUSED_TOKENS["[["], node)
        for op in _descendants(node, "test_operator"):
            if self.text(op) == "-v":
                self.fail("test -v (bash evaluates array subscripts in it)", node)
        self.children(node)

    def arithmetic(self, node: Node) -> None:
        if self.text(node).startswith("$["):
            self.fail(_REFUSED_TOKENS["$["], node)
        self.subst_starts.add(node.start_byte)
        stack = list(node.named_children)
        while stack:
            child = stack.pop()
            if child.type not in _ARITHMETIC:
                self.fail("arithmetic on variables or expansions (the shell may evaluate their values as code)", node)
                return
            stack.extend(child.named_children)

    def expansion(self, node: Node) -> None:
        text = self.text(node)
        if not _POSIX_EXPANSION.match(text):
            self.fail("a bash-only parameter expansion", node)
        elif "'" in text:
            self.fail("quotes inside ${...} (shells disagree on them)", node)
        self.children(node)

    def substitution(self, node: Node) -> None:
        text = self.text(node)
        self.subst_starts.add(node.start_byte)
        if text.startswith("`"):
            self.subst_starts.add(node.end_byte - 1)
            self.backticks.append((node.start_byte, node.end_byte))
            if "\\" in text:
                self.fail("a backslash inside `...` (nested or escaped substitutions); use $(...)", node)
        self.children(node)

    def redirect(self, node: Node) -> None:
        op = next((c.type for c in node.children if not c.is_named), "")
        dest = node.child_by_field_name("destination")
        fd = node.child_by_field_name("descriptor")
        target = self.text(dest) if dest is not None else ""
        operands = [c for c in node.named_children if c.type != "file_descriptor"]
        if fd is not None and not self.text(fd).isdigit():
            self.fail("named file descriptors (bash-only)", node)
        elif len(operands) > 1:
            self.fail("words after a redirection (put redirections at the end of the command)", node)
        else:
            dup = op in ("<&-", ">&-") or (op in (">&", "<&") and (target.isdigit() or target == "-"))
            if not dup and not (op in (">", ">>", ">|", "<") and target == "/dev/null"):
                self.fail("redirection to or from a file (the shell opens it itself, outside the allowlist; use "
                          "read_file/write_file, or pass the file to an allowed program)", node)
        self.children(node)

    def heredoc(self, node: Node) -> None:
        start = next((c for c in node.children if c.type == "heredoc_start"), None)
        body = next((c for c in node.children if c.type == "heredoc_body"), None)
        op = next((c.type for c in node.children if not c.is_named), "<<")
        if start is None:
            self.fail("a here-document without a delimiter", node)
            return
        raw = self.text(start)
        delimiter = raw.replace("'", "").replace('"', "").replace("\\", "")
        if body is not None:
            quoted = raw != delimiter
            if quoted:
                self.literal.append((body.start_byte, body.end_byte))
            else:
                self.heredoc_bodies.append((body.start_byte, body.end_byte))
            for line in self.text(body).split("\n"):
                if (line.lstrip("\t") if op == "<<-" else line) == delimiter:
                    self.fail("a here-document whose body contains its delimiter line", node)
        self.children(node)

    def comment(self, node: Node) -> None:
        at = node.start_byte
        before = self.src[at - 1] if at else ord("\n")
        if at and (before not in _COMMENT_BEFORE or self.src[at - 2:at] == b"\\\n"):
            self.fail("a # that /bin/sh would not read as a comment", node)
        self.literal.append((node.start_byte, node.end_byte))

    def raw_string(self, node: Node) -> None:
        self.literal.append((node.start_byte, node.end_byte))

    def string(self, node: Node) -> None:
        self.strings.append((node.start_byte, node.end_byte))
        self.children(node)

    # -- the raw-text cross-check -----------------------------------------------------------

    def cross_check(self) -> None:
        """Every substitution a shell would see in the raw text must be one the parse tree showed us."""
        for match in re.finditer(rb"\$\(|`|<\(|>\(", self.src):
            at = match.start()
            token = match.group()
            if _inside(at, self.literal):
                continue
            if token in (b"<(", b">(") and _inside(at, self.strings):
                continue
            if token in (b"$(", b"`") and at in self.subst_starts:
                continue
            if token == b"`" and _escaped(self.src, at) and not _inside(at, self.backticks):
                continue
            self.fail(f"{token.decode()} at offset {at} that the parser did not read as a substitution")
        self.continuations()

    def continuations(self) -> None:
        """A backslash-newline glued to text: /bin/sh deletes it before reading tokens (`$\\<newline>(` is `$(`),
        the parser does not. Only the usual style, a space before the backslash, cannot join two tokens."""
        for match in re.finditer(rb"\\\n", self.src):
            at = match.start()
            if _escaped(self.src, at) or _inside(at, self.literal):
                continue
            before = self.src[at - 1] if at else ord("\n")
            if before not in b" \t\n" or _inside(at, self.heredoc_bodies):
                self.fail(f"a line continuation (backslash-newline) at offset {at} inside a word, an operator or a "
                          "here-document; /bin/sh joins the lines before it reads them. Put a space before the "
                          "backslash, or keep the word on one line")


def _inside(at: int, spans: list[tuple[int, int]]) -> bool:
    return any(start <= at < end for start, end in spans)


def _escaped(src: bytes, at: int) -> bool:
    count = 0
    while at - count - 1 >= 0 and src[at - count - 1] == ord("\\"):
        count += 1
    return count % 2 == 1


def _descendants(node: Node, kind: str) -> list[Node]:
    found, stack = [], list(node.children)
    while stack:
        child = stack.pop()
        if child.type == kind:
            found.append(child)
        stack.extend(child.children)
    return found


_HANDLERS: dict[str, Callable[[_Checker, Node], None]] = {
    "command": _Checker.command,
    "command_name": _Checker.children,
    "variable_assignment": _Checker.assignment,
    "variable_assignments": _Checker.children,
    "declaration_command": _Checker.declaration,
    "unset_command": _Checker.unset,
    "for_statement": _Checker.for_loop,
    "test_command": _Checker.test,
    "arithmetic_expansion": _Checker.arithmetic,
    "expansion": _Checker.expansion,
    "command_substitution": _Checker.substitution,
    "file_redirect": _Checker.redirect,
    "heredoc_redirect": _Checker.heredoc,
    "comment": _Checker.comment,
    "raw_string": _Checker.raw_string,
    "string": _Checker.string,
}

_parser: Parser | None = None


def analyze(script: str, *, strict: bool, refuse_var: RefuseVar) -> ScriptReport:
    """List the commands `script` would run; in strict mode raise `Unverifiable` for anything unverifiable."""
    global _parser
    if _parser is None:
        import tree_sitter_bash
        from tree_sitter import Language, Parser

        _parser = Parser(Language(tree_sitter_bash.language()))
    source = script.encode("utf-8", "surrogateescape")
    checker = _Checker(source, strict, refuse_var)
    if strict:
        bad = next((c for c in script if (c < " " and c not in "\t\n") or c == "\x7f"), None)
        if bad is not None:
            raise _refused(f"control character {bad!r} (only tab and newline are accepted)")
    tree = _parser.parse(source)
    if tree.root_node.has_error and strict:
        raise _refused("it does not parse as a shell script (syntax error or unsupported syntax)")
    checker.walk(tree.root_node)
    if strict:
        checker.cross_check()
    return checker.report
