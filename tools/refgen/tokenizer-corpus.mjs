// The tokenizer reference corpus: hand-picked strings per category plus seeded random strings
// built from the same kinds of pieces. Shared by tokenizer-vectors.mjs and tokbench.mjs.

export const handPicked = {
  english: [
    "Hello world",
    "The quick brown fox jumps over the lazy dog.",
    "It was the best of times, it was the worst of times, it was the age of wisdom, it was the age of foolishness.",
    "  Leading spaces and trailing spaces   ",
    "Mr. O'Neil's dog didn't bark; they'd've known.",
    "Don't stop believing! We're gonna make it, aren't we? I'll see; you'd agree.",
    "DON'T SHOUT! I'M NOT DEAF. WE'LL SEE. THEY'RE HERE. YOU'VE WON. HE'D GO. IT'S OK",
    "rock 'n' roll, 'quoted', ''double'', '' , 'tis",
    "e.g. i.e. etc. vs. U.S.A. a.m. p.m.",
    "Email: someone@example.com, URL: https://example.org/path?q=1&r=two#frag",
    "Prices: $3.50, €4,99, £100, ¥2000 — 50% off!!!",
    "Hyphen-ated words, em—dash, en–dash and ellipsis…",
    "\"Smart quotes\" and ‘single’ ones, «guillemets» and „German“ ones.",
    "A sentence.\nAnother line.\n\nA new paragraph after a blank line.",
    "tab\tseparated\tvalues\t\t\tend",
    "ALL CAPS HEADLINE: MARKETS RALLY AS RATES FALL",
    "camelCaseIdentifier snake_case_name kebab-case-name PascalCase",
    "supercalifragilisticexpialidocious antidisestablishmentarianism",
    "Na\u00efve caf\u00e9 r\u00e9sum\u00e9 co\u00f6perate fa\u00e7ade",
    "The year 1984, the number 3.14159, and 1,000,000 items.",
  ],
  code: [
    "package main\n\nimport \"fmt\"\n\nfunc main() {\n\tfmt.Println(\"hello, 世界\")\n}\n",
    "func (t *Tokenizer) Encode(text string) []int {\n\tif len(text) == 0 {\n\t\treturn nil\n\t}\n\treturn t.encode(text)\n}",
    "def fib(n: int) -> int:\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n\nprint([fib(i) for i in range(10)])",
    "class Foo(object):\n    def __init__(self, x):\n        self._x = x  # private\n\n    @property\n    def x(self):\n        return self._x\n",
    "const add = (a, b) => a + b;\nconsole.log(`sum: ${add(2, 3)}`);\nexport default { add };",
    "async function load(url) {\r\n  const res = await fetch(url);\r\n  if (!res.ok) throw new Error(res.statusText);\r\n  return res.json();\r\n}\r\n",
    "fn main() {\n    let v: Vec<u32> = (0..10).map(|x| x * x).collect();\n    println!(\"{:?}\", v);\n}\n",
    "impl<'a> Iterator for Words<'a> {\n    type Item = &'a str;\n    fn next(&mut self) -> Option<Self::Item> { None }\n}",
    "#include <stdio.h>\n\nint main(int argc, char **argv) {\n    for (int i = 0; i < argc; ++i) printf(\"%s\\n\", argv[i]);\n    return 0;\n}\n",
    "SELECT u.id, COUNT(*) AS n\nFROM users u\nJOIN orders o ON o.user_id = u.id\nWHERE o.total >= 100.00\nGROUP BY u.id\nORDER BY n DESC;",
    "{\"name\": \"lily\", \"version\": \"1.0.0\", \"tags\": [\"a\", \"b\"], \"nested\": {\"k\": null, \"v\": true}}",
    "<html>\n  <body>\n    <div class=\"x\">&lt;tag&gt; &amp; &#x27;</div>\n  </body>\n</html>",
    "x = [1,2,3];y=x[::-1];z={k:v for k,v in zip(x,y)}  ## comment\n\n\n\n",
    "    indented with four spaces\n        and eight\n\t\tand two tabs\n",
    "if (a && b || !c) { x += 1; y <<= 2; z >>>= 3; } else if (d != e) { return -1; }",
    "#!/bin/sh\nset -eu\nfor f in *.go; do gofmt -l \"$f\"; done 2>/dev/null | wc -l\n",
  ],
  cjk: [
    "你好，世界！今天是2026年8月13日 🎉",
    "人工智能正在改变世界。机器学习、深度学习和自然语言处理是其核心技术。",
    "北京是中华人民共和国的首都，位于华北平原的北部。",
    "我爱自然语言处理，也喜欢写Go代码（goroutine很好用）。",
    "日本語のテキストです。ひらがな、カタカナ、漢字が混ざっています。",
    "東京タワーは高さ333メートルの電波塔です。ｶﾀｶﾅ半角もあります。",
    "吾輩は猫である。名前はまだ無い。",
    "안녕하세요, 세계! 한국어 텍스트입니다.",
    "대한민국의 수도는 서울입니다. 오늘 날씨가 좋네요.",
    "混合 text 中文 English 日本語 한국어 mixed together.",
    "「引用」『二重引用』【括弧】〈山括弧〉《書名》",
  ],
  rtl: [
    "مرحبا بالعالم! هذا نص باللغة العربية.",
    "اللُّغَةُ العَرَبِيَّةُ جَمِيلَةٌ",
    "١٢٣ ٤٥٦ ٧٨٩ ۰۱۲۳ العدد ٣٫١٤",
    "שלום עולם! זהו טקסט בעברית.",
    "فارسی: سلام دنیا، حال شما چطور است؟",
  ],
  indic_thai: [
    "नमस्ते दुनिया! यह हिंदी पाठ है।",
    "संस्कृतम् भाषा अतीव प्राचीना अस्ति।",
    "क्षत्रिय ज्ञान श्री द्वार",
    "স্বাগতম বাংলা ভাষায়",
    "தமிழ் மொழி மிகவும் பழமையானது",
    "สวัสดีครับ ผมชื่ออเล็กซ์",
    "ภาษาไทยมีวรรณยุกต์ ่ ้ ๊ ๋ และสระ ิ ี ึ ื",
    "กรุงเทพมหานคร อมรรัตนโกสินทร์",
    "ខ្ញុំស្រលាញ់ភាសាខ្មែរ",
    "Tiếng Việt có dấu: Hà Nội, Thành phố Hồ Chí Minh, người Việt.",
    "Ελληνικά: Καλημέρα κόσμε! Русский: Привет, мир!",
  ],
  emoji: [
    "👋🌍 hello 😀😃😄",
    "Family: 👨‍👩‍👧‍👦 couple: 👩‍❤️‍👨 technologist: 🧑‍💻",
    "Thumbs: 👍 👍🏻 👍🏼 👍🏽 👍🏾 👍🏿",
    "Flags: 🇯🇵 🇺🇸 🇩🇪 🇫🇷 🇨🇳 🏴󠁧󠁢󠁳󠁣󠁴󠁿",
    "Keycaps: 1️⃣ 2️⃣ #️⃣ *️⃣ and ❤️ vs ❤",
    "🏳️‍🌈🏳️‍⚧️🐻‍❄️👁️‍🗨️",
    "emoji😀inside😀words and 🔥🔥🔥 runs",
  ],
  whitespace: [
    "a  b   c    d     e",
    "          ten spaces before",
    "trailing ten          ",
    "\n\n\n\nfour newlines first",
    "CRLF\r\nline\r\n\r\nblank\r\n",
    "lone CR\rthen\r\r\rthree",
    "mixed \t \n \r\n \t\t\n  \n",
    "NBSP\u00a0here\u00a0\u00a0twice and narrow\u202fnbsp",
    "ideographic\u3000space\u3000\u3000here",
    "em\u2003space en\u2002space thin\u2009space hair\u200aspace",
    "line\u2028separator paragraph\u2029separator",
    "NEL\u0085char and BOM\ufeffchar and ZWSP\u200bchar",
    "Mongolian\u180evowel separator and\u000bVT and\u000cFF",
    "file\u001cgroup\u001drecord\u001eunit\u001fseps",
    "   \u00a0 \u3000\t\u2003\n\u0085 \r\n\u2028 x",
    " ",
    "\n",
    "\t",
    "\u3000",
    "",
    "x\n",
    " \n ",
    "space before punct .,;: and after!? end",
    "    \n\n    \n\n",
  ],
  digits: [
    "0123456789",
    "3.14159265358979323846264338327950288",
    "1,234,567.89 and 1.234.567,89",
    "2026-08-13T12:34:56.789Z",
    "+1 (555) 123-4567",
    "Devanagari digits: ०१२३४५६७८९",
    "Thai digits: ๐๑๒๓๔๕๖๗๘๙",
    "Fullwidth: ０１２３４５６７８９ and ＡＢＣ",
    "Roman: Ⅰ Ⅱ Ⅻ ⅻ and circled ① ② ⑳ and superscripts x² y³ ½ ¾",
    "Bengali ০১২৩ Tamil ௦௧௨ Khmer ០១២",
    "0x1F 0b1010 1e-9 1_000_000",
  ],
  special: [
    "<|im_start|>user\nName the two colors of a chessboard.<|im_end|>\n<|im_start|>assistant\n<think>\n",
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n",
    "<think>\nLet me think about this.\n</think>\n\nThe answer is 42.",
    "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call>",
    "<tool_response>\n{\"temp\": 21}\n</tool_response>",
    "<|endoftext|><|im_end|><|im_start|><|im_start|>",
    "text<|im_end|>text<think>text</think>text",
    "<|im_start |> <|im_start| > <im_start> <|IM_START|> < think> <think",
    "<|vision_start|><|image_pad|><|vision_end|>Describe this.",
    "<|fim_prefix|>def f():<|fim_suffix|>\n    return 1<|fim_middle|>",
    " <|im_end|> spaces around <|im_end|>  ",
    "<<|im_end|>> <|<|im_end|>|>",
  ],
  normalization: [
    "Cafe\u0301 re\u0301sume\u0301 nai\u0308ve",
    "A\u030a \u212b \u00c5 Angstrom three ways",
    "\u1100\u1161\u11a8 decomposed hangul",
    "e\u0301\u0302\u0323 stacked marks",
    "\u0301 mark after space, .\u0301 after dot, 1\u0301 after digit",
    "\u00e9\u0301 and \ufb01 ligature and \u2126 ohm",
    "Vie\u0323\u0302t Nam NFD",
    "q\u0307\u0323 ǆ ǅ Ǆ",
  ],
  edge: [
    "'s 't 're 've 'm 'll 'd",
    "'S 'T 'RE 'VE 'M 'LL 'D 'Re 'rE",
    "it'sn't x'll'd 'll'",
    "'ſ long s: it'ſ and 'ſt",
    "'ſt x'ſt it'ſs 'ſſ 'ſ'ſ",
    "''''''''",
    "!!!???...,,,;;;:::",
    "a!b@c#d$e%f^g&h*i(j)k",
    "...\n\n\n",
    " !\n",
    "a\u0300\u0300\u0300\u0300\u0300",
    "\u0e01\u0e34\u0e4a\u0e01\u0e34\u0e4a",
    "x" + "a".repeat(300),
    "z".repeat(1000),
    "🙂".repeat(50),
    "ab ".repeat(200),
  ],
};

// mulberry32: a tiny seeded PRNG so the random corpus is the same on every run.
export function rng(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

export const pieces = [
  "hello", "World", "the", " quick", "DON'T", "'s", "'LL", "it's", "we'VE", "ſ",
  "你好", "世界", "人工智能", "日本語", "カタカナ", "한국어", "مرحبا", "שלום", "नमस्ते", "क्षि",
  "สวัสดี", "ครับ", "ภาษาไทย", "Привет", "Ελλάδα", "Việt", "e\u0301", "a\u0308\u0301", "\u0301", "\u0e34",
  "\u0903", "\u20dd", "0", "42", "3.14", "١٢٣", "०९", "๒๓", "０", "Ⅻ", "½",
  "😀", "👍🏽", "👨‍👩‍👧", "🇫🇷", "❤️", "🧑‍💻", "1️⃣", "🏳️‍🌈",
  " ", "  ", "    ", "\t", "\n", "\r\n", "\r", "\n\n", "\u00a0", "\u3000", "\u2003", "\u2028",
  "\u0085", "\ufeff", "\u200b", "\u202f", "\u000b", "\u000c", "\u001c",
  ".", ",", "!", "?", "...", "—", "(", ")", "{", "}", "[", "]", "<", ">", "/", "\\", "\"", "'", "`", "#", "@", "$", "%", "_", "-", "=", "+", "*",
  "func", "return", "if err != nil {", "print(", "=>", "::", "->", "&&", "||",
  "<|im_start|>", "<|im_end|>", "<think>", "</think>", "<tool_call>", "<|endoftext|>", "<|im_start", "im_end|>",
];

export function randomStrings(seed, count, maxPieces) {
  const r = rng(seed);
  const out = [];
  for (let i = 0; i < count; i++) {
    const n = 1 + Math.floor(r() * maxPieces);
    let s = "";
    for (let j = 0; j < n; j++) s += pieces[Math.floor(r() * pieces.length)];
    out.push(s);
  }
  return out;
}

// corpus returns [category, text] pairs: every hand-picked string and 150 random ones.
export function corpus() {
  const out = [];
  for (const [cat, list] of Object.entries(handPicked)) for (const s of list) out.push([cat, s]);
  for (const s of randomStrings(20260813, 150, 24)) out.push(["random", s]);
  return out;
}
