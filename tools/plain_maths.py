"""LaTeX maths as plain Unicode text, for what cannot typeset it (the slides' speaker notes).

    unicode_maths(r"$\\sqrt{d}$ and $\\alpha_i$")   ->  "√d and αᵢ"
    unicode_maths(r"$q^\\top k / \\sqrt{d}$")        ->  "qᵀk/√d"

Only the notation the chapters write is read: Greek letters, operators and relations,
\\frac, \\sqrt, super- and subscripts (as Unicode where every character has one), \\text and the
font commands (their argument kept as it is); an unknown command keeps its name without the
backslash, so the result never holds a LaTeX command.
"""

import re
import unicodedata

INLINE = re.compile(r"\$\$(.+?)\$\$|\$([^$]+?)\$", re.S)

GREEK = (
    "alpha α beta β gamma γ delta δ epsilon ε varepsilon ε zeta ζ eta η theta θ iota ι kappa κ "
    "lambda λ mu μ nu ν xi ξ pi π rho ρ sigma σ tau τ phi φ varphi φ chi χ psi ψ omega ω "
    "Gamma Γ Delta Δ Theta Θ Lambda Λ Xi Ξ Pi Π Sigma Σ Phi Φ Psi Ψ Omega Ω"
)
SYMBOLS = {
    **dict(zip(GREEK.split()[::2], GREEK.split()[1::2])),
    "cdot": "·", "times": "×", "div": "÷", "pm": "±", "mp": "∓", "circ": "∘", "odot": "⊙",
    "otimes": "⊗", "oplus": "⊕", "ast": "∗", "star": "⋆", "in": "∈", "notin": "∉",
    "subset": "⊂", "subseteq": "⊆", "cup": "∪", "cap": "∩", "le": "≤", "leq": "≤", "ge": "≥",
    "geq": "≥", "ne": "≠", "neq": "≠", "approx": "≈", "sim": "∼", "simeq": "≃", "equiv": "≡",
    "propto": "∝", "ll": "≪", "gg": "≫", "to": "→", "rightarrow": "→", "leftarrow": "←",
    "Rightarrow": "⇒", "implies": "⇒", "mapsto": "↦", "infty": "∞", "partial": "∂",
    "nabla": "∇", "sum": "Σ", "prod": "∏", "int": "∫", "ell": "ℓ", "top": "ᵀ", "intercal": "ᵀ",
    "dots": "…", "ldots": "…", "cdots": "⋯", "vdots": "⋮", "ddots": "⋱", "mid": "|",
    "vert": "|", "lvert": "|", "rvert": "|", "|": "‖", "Vert": "‖", "lVert": "‖", "rVert": "‖",
    "langle": "⟨", "rangle": "⟩", "lfloor": "⌊", "rfloor": "⌋", "lceil": "⌈", "rceil": "⌉",
    "{": "{", "}": "}", "%": "%", "$": "$", "&": "&", "#": "#", "_": "_", "forall": "∀",
    "exists": "∃", "neg": "¬", "land": "∧", "lor": "∨", "emptyset": "∅", "prime": "′",
    "log": "log", "ln": "ln", "exp": "exp", "max": "max", "min": "min", "arg": "arg",
    "sin": "sin", "cos": "cos", "tan": "tan", "det": "det", "dim": "dim", "lim": "lim",
    "sup": "sup", "inf": "inf", "Pr": "Pr", "argmax": "argmax", "argmin": "argmin",
    "bmod": " mod ", "mod": " mod ",
    ",": " ", ";": " ", ":": " ", "!": "", " ": " ", "quad": "  ", "qquad": "  ",
    "\\": "; ", "left": "", "right": "", "big": "", "Big": "", "bigg": "", "Bigg": "",
    "bigl": "", "bigr": "", "Bigl": "", "Bigr": "", "displaystyle": "", "textstyle": "",
    "limits": "", "nolimits": "", "nonumber": "", "notag": "",
}  # fmt: skip
BLACKBOARD = {"R": "ℝ", "N": "ℕ", "Z": "ℤ", "Q": "ℚ", "C": "ℂ", "E": "𝔼", "P": "ℙ"}
ACCENTS = {"hat": "\u0302", "widehat": "\u0302", "tilde": "\u0303", "widetilde": "\u0303",
           "bar": "\u0304", "overline": "\u0305", "vec": "\u20d7", "dot": "\u0307"}  # fmt: skip
KEEP = {"text", "textrm", "textit", "textbf", "mathrm", "mathit", "mathbf", "mathsf", "mathtt",
        "texttt", "boldsymbol", "bm", "operatorname", "mathcal", "mathscr", "mbox",
        "emph"}  # fmt: skip
SUPERSCRIPTS = dict(zip("0123456789+-=()niTt", "⁰¹²³⁴⁵⁶⁷⁸⁹⁺⁻⁼⁽⁾ⁿⁱᵀᵗ"))
SUBSCRIPTS = dict(zip("0123456789+-=()aehijklmnoprstuvx", "₀₁₂₃₄₅₆₇₈₉₊₋₌₍₎ₐₑₕᵢⱼₖₗₘₙₒₚᵣₛₜᵤᵥₓ"))
SUPERSCRIPTS.update({"ᵀ": "ᵀ", "′": "′", "*": "*", "⋆": "*", "∗": "*", "−": "⁻"})
SUBSCRIPTS["−"] = "₋"
RELATIONS = "=≠<>≤≥≈≃≡∼∝∈∉⊂⊆→←⇒↦≪≫"
WORD_END = "\u2063"  # after an operator's name (log, softmax), until the spacing is settled
TOKEN = re.compile(r"\\[A-Za-z]+\*?|\\.|[{}^_]|\s+|.", re.S)


def unicode_maths(text):
    """`text` with each $...$ (and $$...$$) replaced by its maths as plain text."""
    return INLINE.sub(lambda m: maths(m[1] if m[1] is not None else m[2]), text)


def maths(latex):
    """One formula's LaTeX as plain text: "\\frac{1}{\\sqrt{d}}" -> "1/√d"."""
    latex = re.sub(r"\\(begin|end)\{[a-z*]+\}(\{[^}]*\})?", " ", latex)  # aligned, cases, ...
    text, _ = _sequence(TOKEN.findall(latex.replace("&", "\\ ")), 0)
    text = re.sub(rf"\s*([{RELATIONS}])\s*", r" \1 ", text)  # a relation between spaces
    # an operator's name apart from a letter after it (log x), not from its brackets (max(a))
    text = re.sub(f"{WORD_END}(?=[A-Za-z0-9\u0370-\u03ffℓ√])", " ", text).replace(WORD_END, "")
    text = re.sub(r"\s*[,;]\s*;", ";", text)  # the end of an aligned line
    return unicodedata.normalize("NFC", re.sub(r"\s+", " ", text).strip(" ;"))  # ŷ, one character


def _sequence(tokens, k, words=False):
    """The text of tokens[k:] up to the closing brace; returns it and where it ended. Spaces
    count only in `words` (the argument of \\text)."""
    out = []
    while k < len(tokens) and tokens[k] != "}":
        if words and tokens[k].isspace():
            piece, k = " ", k + 1
        else:
            piece, k = _atom(tokens, k)
        out.append(piece)
    return "".join(out), k + 1


def _argument(tokens, k):
    """One argument: a {group}, a command, or a single character."""
    while k < len(tokens) and tokens[k].isspace():
        k += 1
    if k >= len(tokens):
        return "", k
    if tokens[k] == "{":
        return _sequence(tokens, k + 1)
    return _atom(tokens, k)


def _atom(tokens, k):
    """The text of the token at k (with its arguments); returns it and the next index."""
    token = tokens[k]
    if token == "{":
        return _sequence(tokens, k + 1)
    if token in "^_":
        body, k = _argument(tokens, k + 1)
        return _script(body, SUPERSCRIPTS if token == "^" else SUBSCRIPTS, token), k
    if token.isspace():
        return "", k + 1
    if not token.startswith("\\"):
        return {"-": "−", "'": "′", "~": " "}.get(token, token), k + 1
    return _command(token[1:].rstrip("*"), tokens, k + 1)


def _command(name, tokens, k):
    """A command and its arguments as text."""
    if name == "frac" or name in ("dfrac", "tfrac"):
        top, k = _argument(tokens, k)
        bottom, k = _argument(tokens, k)
        return f"{_grouped(top)}/{_grouped(bottom)}", k
    if name == "sqrt":
        body, k = _argument(tokens, k)
        return f"√{_grouped(body)}", k
    if name == "mathbb":
        body, k = _argument(tokens, k)
        return "".join(BLACKBOARD.get(c, c) for c in body), k
    if name in ACCENTS:
        body, k = _argument(tokens, k)
        return (body + ACCENTS[name]) if len(body) == 1 else body, k
    if name in KEEP:
        body, k = _text_argument(tokens, k)
        named = name in ("operatorname", "mathrm") and re.fullmatch(r"[A-Za-z]{2,}", body)
        return body + (WORD_END if named else ""), k
    symbol = SYMBOLS.get(name, name)
    return symbol + (WORD_END if re.fullmatch(r"[A-Za-z]{2,}", symbol) else ""), k


def _text_argument(tokens, k):
    """The argument of \\text and the font commands, its spaces kept."""
    while k < len(tokens) and tokens[k].isspace():
        k += 1
    if k < len(tokens) and tokens[k] == "{":
        return _sequence(tokens, k + 1, words=True)
    return _argument(tokens, k)


def _grouped(text):
    """A fraction's or a root's part, in brackets where it is more than one term."""
    text = text.strip()
    return f"({text})" if re.search(r"[-+−/·×= ]", _outside_brackets(text)) else text


def _outside_brackets(text):
    """`text` without what its brackets hold: where its operators are at the top level."""
    while True:
        inner = re.sub(r"\([^()]*\)|\[[^\[\]]*\]|\{[^{}]*\}", "", text)
        if inner == text:
            return text
        text = inner


def _script(body, table, mark):
    """A super- or subscript: Unicode where every character has one, else ^(...) or _..."""
    body = body.strip()
    if body and all(c in table for c in body):
        return "".join(table[c] for c in body)
    if mark == "_":
        # a written-out subscript ends its word: "n_g n_p" reads "n_g nₚ", not "n_gnₚ"
        return f"_{body}{WORD_END}" if re.fullmatch(r"\w+", body) else f"_({body})"
    return f"^{body}" if re.fullmatch(r"\w", body) else f"^({body})"
