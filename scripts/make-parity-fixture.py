#!/usr/bin/env python3
"""Build tests/fixtures/parity.jsonl: reference values for refscore's embedding
metrics (docs/metrics.md#embedding-metrics), computed with the Python reference implementations.

For every (reference, output) pair built deterministically below it records:

* ``cosine``: sentence-transformers ``SentenceTransformer(model, device="cpu")``,
  ``encode(..., normalize_embeddings=True)``, dot product, clamped ``max(0, cos)``.
* ``bertscore_{precision,recall,f1}``: ``bert_score.score(cands=outputs,
  refs=references, model_type=<model path>, num_layers=6, batch_size=1,
  idf=False)``.
* ``bertscore_{precision,recall,f1}_idf``: the same with ``idf=True`` (bert_score
  computes idf over the ``refs`` list, i.e. all of the fixture's references:
  idf(w) = ln((M+1)/(df(w)+1)), M = number of rows, unseen pieces ln(M+1),
  [CLS]/[SEP] weight 0).
* ``ref_tokens`` / ``out_tokens``: word-piece counts including [CLS]/[SEP]
  (tokenizer.json, no truncation; every text is checked to be < 256).

``batch_size=1`` is required: bert_score pads each batch of pairs and lets padded
positions count as similarity 0 inside the max, which inflates scores and makes
them depend on batch composition (docs/metrics.md#embedding-metrics). The script also prints how far a
default batched run (batch_size=64) would be off.

bert_score 0.3.13 calls ``tokenizer.build_inputs_with_special_tokens([])`` for an
empty (after ``str.strip()``) text, a method transformers 5 removed; the script
monkeypatches ``bert_score.utils.sent_encode`` so such a text is encoded as
[CLS][SEP], which is what that call returned under transformers 4. bert_score then
reports P = R = F1 = 0 for any pair where either side is empty.

Every bert_score number is cross-checked against an independent numpy
implementation of the formula of docs/metrics.md#bertscore, fed with last-layer token embeddings from
``transformers.AutoModel`` and token ids from the ``tokenizers`` library (one
unpadded forward pass per distinct text); cosine is cross-checked the same way
(mean pooling). The script fails if any difference exceeds --tolerance.

Setup (a virtualenv outside the repository; CPU is enough, the PyPI torch wheel
is the CUDA build but runs on CPU):

    python3.11 -m venv /work/venvs/parity
    /work/venvs/parity/bin/pip install -r scripts/parity-requirements.txt
    scripts/fetch-model.sh                     # models/all-MiniLM-L6-v2/

Run (from anywhere; paths default to the repository):

    /work/venvs/parity/bin/python scripts/make-parity-fixture.py
    /work/venvs/parity/bin/python scripts/make-parity-fixture.py \\
        --model models/all-MiniLM-L6-v2 --out tests/fixtures/parity.jsonl

It uses one CPU thread by default (--threads) and takes about 40 seconds.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import math
import os
import random
import sys
import time
from collections import Counter

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MAX_TOKENS = 256  # sentence-transformers max_seq_length for all-MiniLM-L6-v2
LONG_TARGET = 230  # long texts are built up to this many word-pieces


def log(msg: str) -> None:
    print(f"[parity] {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------
# Data: every text below is a literal; nothing depends on hash order, the
# clock or the environment. Transformations use random.Random(SEED).
# ---------------------------------------------------------------------------
SEED = 20240611

# (reference, [outputs...]): short factual answers. Each output becomes a row,
# so every reference here is repeated (which matters for idf).
FACTUAL = [
    ("Paris", ["Paris", "paris", "The capital of France is Paris.", "Lyon",
               "It's Paris, I think, but it could be Marseille."]),
    ("Leonardo da Vinci", ["Da Vinci", "Leonardo da Vinci painted the Mona Lisa.",
                           "Michelangelo", "leonardo"]),
    ("New York City", ["NYC", "New York", "The answer is New York City.", "Boston"]),
    ("Mount Everest", ["Everest", "Mount Everest, at 8,849 metres.", "K2",
                       "Mt. Everest"]),
    ("William Shakespeare", ["Shakespeare", "It was written by William Shakespeare.",
                             "Christopher Marlowe", "Charles Dickens"]),
    ("H2O", ["Water, H2O.", "h2o", "Hydrogen peroxide (H2O2)", "CO2"]),
    ("Jupiter", ["Jupiter is the largest planet.", "Saturn", "jupiter", "The Sun"]),
    ("1945", ["It ended in 1945.", "1944", "Nineteen forty-five", "1945"]),
    ("Albert Einstein", ["Einstein", "Isaac Newton", "Albert Einstein (1879-1955)",
                         "It might have been Einstein or Bohr."]),
    ("The Pacific Ocean", ["Pacific", "the Pacific Ocean",
                           "The Atlantic Ocean", "Pacific Ocean."]),
    ("Tokyo", ["Tokyo", "Kyoto", "Tokyo, Japan", "The capital of Japan is Tokyo."]),
    ("Oxygen", ["O2", "oxygen gas", "Nitrogen", "Oxygen."]),
    ("George Washington", ["Washington", "President George Washington",
                           "Abraham Lincoln", "John Adams was the first president."]),
    ("Canberra", ["Sydney", "Canberra is the capital of Australia.", "canberra",
                  "Melbourne"]),
    ("Photosynthesis", ["photosynthesis", "Respiration",
                        "Plants make sugar from light by photosynthesis.",
                        "Transpiration"]),
    ("Yes", ["Yes", "yes.", "No", "Yes, that is correct.", "Maybe"]),
    ("No", ["No", "no", "Yes", "No, that is not the case.", "Not sure"]),
    ("Blue whale", ["The blue whale", "African elephant", "blue whales",
                    "Whale shark"]),
    ("Amazon River", ["The Amazon", "Nile", "Amazon river in South America",
                      "Mississippi"]),
    ("Marie Curie", ["Curie", "Marie Skłodowska-Curie", "Pierre Curie",
                     "Rosalind Franklin"]),
    ("Au", ["Au", "Gold's symbol is Au.", "Ag", "Go"]),
    ("Mercury", ["Mercury", "Venus", "The planet Mercury.", "Mars"]),
    ("Berlin", ["Berlin", "Bonn", "Berlin, Germany", "Munich"]),
    ("Charles Darwin", ["Darwin", "Alfred Russel Wallace",
                        "Charles Darwin, On the Origin of Species (1859)",
                        "Gregor Mendel"]),
]

PARAPHRASES = [
    ("The meeting has been moved to Thursday afternoon.",
     "We rescheduled the meeting for Thursday after lunch."),
    ("The patient should take the medication twice a day with food.",
     "Take the medicine two times daily, with meals."),
    ("Water boils at 100 degrees Celsius at sea level.",
     "At sea level, the boiling point of water is 100 °C."),
    ("The company reported a loss in the third quarter.",
     "In Q3 the firm posted a loss."),
    ("She didn't attend the conference because she was ill.",
     "Being sick, she skipped the conference."),
    ("The train was delayed by forty minutes due to a signal failure.",
     "A signalling fault held the train up for 40 minutes."),
    ("Regular exercise lowers the risk of heart disease.",
     "Working out regularly reduces your chances of cardiovascular illness."),
    ("The store opens at nine in the morning.",
     "Opening time is 9 a.m."),
    ("Children under twelve must be accompanied by an adult.",
     "Kids younger than 12 need an adult with them."),
    ("The bridge was closed for repairs last week.",
     "Last week the bridge shut so it could be repaired."),
    ("He is the tallest player on the team.",
     "No one on the team is taller than him."),
    ("The novel was translated into more than forty languages.",
     "There are translations of the book in over 40 languages."),
    ("Please submit the form before Friday.",
     "The form is due by Friday; send it in before then."),
    ("The museum is free for students.",
     "Students get into the museum without paying."),
    ("The recipe calls for two cups of flour.",
     "You need 2 cups of flour for this recipe."),
    ("Sales increased by 15 percent compared with last year.",
     "Compared to the previous year, sales rose 15%."),
    ("The flight was cancelled because of the storm.",
     "The storm led to the flight's cancellation."),
    ("I can't find my keys anywhere.",
     "My keys seem to have vanished."),
    ("The software update fixes a security vulnerability.",
     "This patch closes a security hole."),
    ("Most of the audience left before the end of the film.",
     "The majority of viewers walked out before the movie finished."),
    ("Turn off the lights when you leave the room.",
     "Switch the lights off on your way out."),
    ("The river flooded after days of heavy rain.",
     "Days of downpour made the river overflow."),
    ("The contract expires at the end of December.",
     "The agreement runs out when December ends."),
    ("Dogs need to be walked every day.",
     "A dog should go for a walk daily."),
    ("The library extended its opening hours during exams.",
     "During the exam period the library stayed open longer."),
    ("He apologised for the mistake.",
     "He said he was sorry for the error."),
    ("Prices are expected to fall next year.",
     "Next year costs will probably go down."),
    ("The experiment confirmed the hypothesis.",
     "The results of the test supported the theory."),
    ("It is forbidden to smoke inside the building.",
     "Smoking is not allowed indoors here."),
    ("The car needs new tyres before winter.",
     "Before winter comes, the car must get new tires."),
    ("The population of the city doubled in twenty years.",
     "In two decades the number of people living in the city grew twofold."),
    ("The teacher explained the lesson again for those who were absent.",
     "For absent pupils, the teacher went over the lesson a second time."),
    ("Vaccines train the immune system to recognise a pathogen.",
     "A vaccine teaches your immune defences to identify a germ."),
    ("The printer is out of paper.",
     "There's no paper left in the printer."),
    ("Their flight lands at half past six.",
     "They arrive at 6:30."),
    ("Insulin regulates blood sugar levels.",
     "Blood glucose is controlled by the hormone insulin."),
    ("The law came into force in 2018.",
     "The legislation took effect in 2018."),
    ("The restaurant only accepts cash.",
     "Card payments aren't accepted at the restaurant; pay in cash."),
    ("Use a strong password and enable two-factor authentication.",
     "Pick a robust password and turn on 2FA."),
    ("The shipment will arrive within three to five business days.",
     "Expect delivery in 3-5 working days."),
]

NUMBERS = [
    ("100", "one hundred"), ("one hundred", "100"), ("20", "twenty"),
    ("twenty", "20"), ("3", "three"), ("three", "3"), ("12", "twelve"),
    ("1,000,000", "one million"), ("1000000", "a million"), ("7", "seven"),
    ("0", "zero"), ("zero", "0"), ("42", "forty-two"), ("forty two", "42"),
    ("The answer is 15.", "The answer is fifteen."),
    ("She was 96 years old.", "She was ninety-six years old."),
    ("96 years old", "more than 95"), ("3.14", "pi"), ("3.14159", "3.14"),
    ("2.5 kg", "2500 g"), ("50%", "half"), ("50 percent", "fifty per cent"),
    ("1/2", "one half"), ("1969", "nineteen sixty-nine"),
    ("12:30", "half past twelve"), ("10 mg twice daily", "ten milligrams two times a day"),
    ("-40", "minus forty"), ("1st", "first"), ("2nd place", "second place"),
    ("3 apples and 4 oranges", "three apples and four oranges"),
    ("$5.99", "five dollars ninety-nine"), ("10^6", "1e6"), ("13", "14"),
    ("1,024", "1024"), ("250 mg", "25 mg"),
]

WRONG = [
    ("The Great Wall of China", "The Eiffel Tower"),
    ("Mitochondria", "The nucleus"),
    ("Cats are mammals.", "Cats are reptiles."),
    ("The Earth orbits the Sun.", "The Sun orbits the Earth."),
    ("Python was created by Guido van Rossum.", "Python was created by James Gosling."),
    ("The speed of light is about 300,000 km/s.", "The speed of sound is about 343 m/s."),
    ("Rome", "Athens"),
    ("Beethoven composed nine symphonies.", "Mozart composed forty-one symphonies."),
    ("DNA is a double helix.", "RNA is usually single-stranded."),
    ("The Treaty of Versailles was signed in 1919.", "The treaty was signed in 1815."),
    ("Iron", "Copper"),
    ("The heart has four chambers.", "The heart has two chambers."),
    ("The Moon causes ocean tides.", "The wind causes ocean tides."),
    ("Antibiotics do not work against viruses.", "Antibiotics cure the common cold."),
    ("Stockholm is the capital of Sweden.", "Oslo is the capital of Sweden."),
    ("The Sahara is a desert.", "I like pancakes with maple syrup."),
    ("Photosynthesis produces oxygen.", "The stock market closed higher today."),
    ("The invoice total is 1,250 euros.", "The invoice total is 1,520 euros."),
    ("Take 5 mg once a day.", "Take 50 mg three times a day."),
    ("Boiling point of ethanol: 78 °C", "Boiling point of ethanol: 100 °C"),
    ("It is raining in London.", "It is sunny in Madrid."),
    ("The shop closes at 5 pm.", "The shop closes at 7 pm."),
    ("The password must be at least 12 characters.", "Passwords can be any length."),
    ("The capital of Canada is Ottawa.", "The capital of Canada is Toronto."),
    ("Neil Armstrong", "Buzz Aldrin"),
    ("Hydrogen has one proton.", "Helium has two protons."),
    ("The report is due on Monday.", "The report was cancelled."),
    ("The answer is B.", "The answer is D."),
    ("True", "False"),
    ("I don't know.", "The answer is 42."),
]

UNICODE = [
    ("café", "cafe"), ("naïve résumé", "naive resume"), ("São Paulo", "Sao Paulo"),
    ("Zürich", "Zurich"), ("Crème brûlée", "creme brulee"),
    ("Ångström", "Angstrom"), ("Dvořák", "Dvorak"), ("Łódź", "Lodz"),
    ("e\u0301te\u0301", "été"),  # combining acute vs precomposed
    ("東京", "Tokyo"), ("北京是中国的首都。", "Beijing is the capital of China."),
    ("東京は日本の首都です。", "東京"), ("서울", "Seoul"),
    ("Привет, мир", "Hello, world"), ("Καλημέρα", "Good morning"),
    ("مرحبا بالعالم", "Hello world"), ("שלום", "Shalom"),
    ("The answer is 👍", "The answer is yes"), ("🎉🎉🎉", "Congratulations!"),
    ("I ❤️ NY", "I love New York"), ("👨‍👩‍👧‍👦 family", "family"),
    ("ＡＢＣ１２３", "ABC123"), ("Ｔｏｋｙｏ", "Tokyo"), ("１００", "100"),
    ("“Smart quotes” — and dashes…", "\"Smart quotes\" - and dashes..."),
    ("ﬁne ﬂour", "fine flour"),  # ligatures
    ("x² + y² = z²", "x^2 + y^2 = z^2"), ("½ cup", "half a cup"),
    ("Straße", "Strasse"), ("İstanbul", "Istanbul"),
    ("zero\u200bwidth\u200bspace", "zero width space"),
    ("soft\u00adhyphen", "softhyphen"), ("non\u00a0breaking space", "non breaking space"),
    ("ideographic\u3000space", "ideographic space"),
]

EMPTY = [
    ("", "Paris"), ("Paris", ""), ("", ""), ("   ", "Paris"), ("Paris", "   "),
    ("\t\n", "Some answer."), ("An answer.", "\n\n"), ("\u3000", "東京"),
    ("Tokyo", "\u00a0\u2003\u2028"), ("  Paris  ", "Paris"), ("Paris", "\tParis\n"),
    ("", "   "), ("Yes", ""),
]

MISC = [
    ('{"name": "Alice", "age": 30}', '{"age": 30, "name": "Alice"}'),
    ('{"status": "ok", "items": [1, 2, 3]}', '{"status": "error", "items": []}'),
    ("def add(a, b):\n    return a + b", "def add(x, y): return x + y"),
    ("SELECT * FROM users WHERE id = 1;", "select * from users where id=1"),
    ("- eggs\n- milk\n- bread", "Eggs, milk and bread."),
    ("1. Preheat the oven\n2. Mix the batter\n3. Bake for 20 minutes",
     "Preheat, mix, then bake 20 min."),
    ("https://example.com/docs/install", "See the installation docs at example.com."),
    ("user@example.com", "user at example dot com"),
    ("?", "!"), ("...", "…"), ("a", "A"), ("I", "i"), ("OK", "ok"),
    ("yes yes yes yes yes", "yes"), ("the the the", "the"),
    ("Pneumonoultramicroscopicsilicovolcanoconiosis", "a lung disease caused by silica dust"),
    ("x" * 120, "x" * 120),  # over max_input_chars_per_word (100) -> [UNK]
    ("abc" * 40, "abc" * 41),
    ("C++ and C#", "C plus plus and C sharp"),
    ("e = mc^2", "E=mc²"), ("COVID-19", "covid 19"), ("U.S.A.", "USA"),
    ("It's", "It is"), ("don't", "do not"), ("state-of-the-art", "state of the art"),
    ("<b>Bold</b> text", "Bold text"), ("**Important:** read this", "Important: read this"),
    ("Answer: (c) 4", "c"), ("N/A", "not applicable"),
    ("The quick brown fox jumps over the lazy dog.",
     "The quick brown fox jumps over the lazy dog."),
    ("The quick brown fox jumps over the lazy dog.",
     "The lazy dog jumps over the quick brown fox."),
    ("The quick brown fox jumps over the lazy dog.", "A fast fox leapt over a sleepy dog."),
]

LONG_TOPICS = {
    "photosynthesis": [
        "Photosynthesis is the process by which green plants, algae and some bacteria convert light energy into chemical energy.",
        "It takes place mainly in the chloroplasts, which contain the green pigment chlorophyll.",
        "During the light-dependent reactions, water molecules are split, releasing oxygen as a by-product.",
        "The energy captured from sunlight is stored temporarily in ATP and NADPH.",
        "In the Calvin cycle, carbon dioxide from the air is fixed into three-carbon sugars.",
        "The enzyme RuBisCO catalyses the first major step of carbon fixation.",
        "These sugars are later used to build glucose, starch and cellulose.",
        "The rate of photosynthesis depends on light intensity, carbon dioxide concentration and temperature.",
        "C4 and CAM plants have evolved mechanisms that reduce water loss in hot, dry climates.",
        "Almost all life on Earth depends directly or indirectly on the products of photosynthesis.",
        "It is also responsible for the oxygen content of the atmosphere.",
        "Scientists study artificial photosynthesis as a way to produce clean fuels.",
        "Leaves are typically broad and flat, which maximises the surface available for absorbing light.",
    ],
    "medication": [
        "Amoxicillin is a penicillin-type antibiotic used to treat bacterial infections such as otitis media, strep throat and pneumonia.",
        "The usual adult dose is 500 mg every eight hours or 875 mg every twelve hours, depending on the severity of the infection.",
        "For children, the dose is calculated by body weight, commonly 25 to 45 mg per kilogram per day divided into two doses.",
        "It should be taken for the full course prescribed, even if the symptoms improve earlier.",
        "Common side effects include nausea, diarrhoea and skin rash.",
        "A severe allergic reaction, with swelling of the face or difficulty breathing, requires emergency care.",
        "Patients with a known penicillin allergy must not take amoxicillin.",
        "The drug does not work against viral infections like the common cold or influenza.",
        "Dose adjustments are needed for patients with severe kidney impairment.",
        "Amoxicillin may reduce the effectiveness of some oral contraceptives.",
        "It can be taken with or without food, although food may reduce stomach upset.",
        "Store the tablets at room temperature, away from moisture and heat.",
        "The oral suspension should be kept in the refrigerator and discarded after fourteen days.",
    ],
    "history": [
        "The French Revolution began in 1789 and transformed the political landscape of France and of Europe.",
        "Financial crisis, food shortages and resentment of aristocratic privilege fuelled popular anger.",
        "On 14 July 1789 a crowd stormed the Bastille, a royal fortress and prison in Paris.",
        "The National Assembly abolished feudal privileges and issued the Declaration of the Rights of Man and of the Citizen.",
        "King Louis XVI attempted to flee in 1791 but was captured at Varennes.",
        "The monarchy was abolished in September 1792 and France became a republic.",
        "Louis XVI was tried for treason and executed in January 1793.",
        "The Reign of Terror, led by the Committee of Public Safety, saw thousands of suspected enemies executed.",
        "Maximilien Robespierre was himself overthrown and guillotined in July 1794.",
        "The Directory governed France from 1795 until Napoleon Bonaparte seized power in 1799.",
        "The Revolution spread ideas of liberty, equality and national sovereignty across the continent.",
        "Historians still debate its causes, its violence and its long-term consequences.",
        "The metric system was one of its lasting practical legacies.",
    ],
    "software": [
        "To deploy the service, first build the container image with the release profile enabled.",
        "Push the image to the internal registry and tag it with the Git commit hash.",
        "Update the deployment manifest so that it references the new image tag.",
        "Apply the manifest to the staging cluster and wait until all pods report ready.",
        "Run the smoke tests against the staging endpoint and check the error rate on the dashboard.",
        "If the error rate stays below one percent for fifteen minutes, promote the release to production.",
        "Production rollouts use a rolling update with at most one unavailable replica.",
        "Database migrations must be backward compatible, because old and new versions run side by side during the rollout.",
        "Keep the previous image tag at hand so that a rollback takes a single command.",
        "After the rollout, watch latency, memory use and logs for at least an hour.",
        "Record the deployment in the change log with the ticket number and the name of the approver.",
        "Never deploy on Friday afternoons unless the change fixes an active incident.",
        "Secrets are injected at runtime from the vault and must never be baked into the image.",
    ],
}


def build_pairs(count_tokens) -> list[tuple[str, str, str]]:
    """Deterministic list of (id, reference, output)."""
    rng = random.Random(SEED)
    rows: list[tuple[str, str, str]] = []

    def add(cat: str, ref: str, out: str) -> None:
        n = sum(1 for r in rows if r[0].startswith(cat + "-"))
        rows.append((f"{cat}-{n:03d}", ref, out))

    for ref, outs in FACTUAL:
        for out in outs:
            add("fact", ref, out)
    for ref, out in PARAPHRASES:
        add("para", ref, out)
    # a few reversed paraphrases (swap roles) so P and R trade places
    for ref, out in PARAPHRASES[:10]:
        add("para", out, ref)
    for ref, out in NUMBERS:
        add("num", ref, out)
    for ref, out in WRONG:
        add("wrong", ref, out)
    # shuffled mismatches: a factual reference against another pair's output
    facts = [(r, o) for r, outs in FACTUAL for o in outs]
    for _ in range(15):
        (r1, _o1), (_r2, o2) = rng.sample(facts, 2)
        add("wrong", r1, o2)
    for ref, out in UNICODE:
        add("uni", ref, out)
    for ref, out in UNICODE[:8]:
        add("uni", out, ref)
    for ref, out in EMPTY:
        add("empty", ref, out)
    for ref, out in MISC:
        add("misc", ref, out)

    # Long answers, up to LONG_TARGET word-pieces.
    def fit(sentences: list[str], limit: int = LONG_TARGET) -> str:
        text = ""
        for s in sentences:
            cand = (text + " " + s).strip()
            if count_tokens(cand) > limit:
                break
            text = cand
        return text

    topics = list(LONG_TOPICS)
    for i, topic in enumerate(topics):
        sents = LONG_TOPICS[topic]
        other = LONG_TOPICS[topics[(i + 1) % len(topics)]]
        full = fit(sents)
        shuffled = sents[:]
        rng.shuffle(shuffled)
        half = fit(sents[: len(sents) // 2])
        add("long", full, full)                                   # identical
        add("long", full, fit(shuffled))                          # same facts, other order
        add("long", full, half)                                   # incomplete answer
        add("long", half, full)                                   # verbose answer
        add("long", full, fit(sents[: len(sents) // 3] + other))  # drifts to another topic
        add("long", full, fit(other))                             # wrong topic entirely
        add("long", full, sents[0])                               # one-sentence answer
        add("long", sents[1], full)                               # short reference, long output
        # light corruption: drop every third word
        words = full.split()
        add("long", full, " ".join(w for k, w in enumerate(words) if k % 3 != 2))
        # medium length, ~120-140 pieces, around the tokenizer.json default of 128
        add("long", fit(sents, 140), fit(shuffled, 125))
    return rows


# ---------------------------------------------------------------------------
# Computation
# ---------------------------------------------------------------------------
def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=os.path.join(REPO, "models", "all-MiniLM-L6-v2"))
    ap.add_argument("--out", default=os.path.join(REPO, "tests", "fixtures", "parity.jsonl"))
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    ap.add_argument("--tolerance", type=float, default=1e-5,
                    help="max allowed |bert_score - numpy formula| and |ST - numpy| (default 1e-5)")
    ap.add_argument("--skip-batched-demo", action="store_true",
                    help="do not run bert_score with batch_size=64 to show the padding inflation")
    args = ap.parse_args()

    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ["OMP_NUM_THREADS"] = str(args.threads)

    t_start = time.time()
    import numpy as np
    import torch
    import tokenizers
    import transformers
    import bert_score
    import bert_score.utils as bs_utils
    from sentence_transformers import SentenceTransformer
    from transformers import AutoModel, AutoTokenizer

    torch.set_num_threads(args.threads)
    model_dir = os.path.abspath(args.model)
    if not os.path.isfile(os.path.join(model_dir, "model.safetensors")):
        log(f"no model at {model_dir}: run scripts/fetch-model.sh first")
        return 1
    # Distribution versions (bert_score 0.3.13's __version__ still says 0.3.12).
    versions = {"python": sys.version.split()[0]}
    for dist in ("torch", "transformers", "sentence-transformers", "bert-score",
                 "tokenizers", "safetensors", "numpy"):
        versions[dist] = importlib.metadata.version(dist)
    log("versions: " + ", ".join(f"{k} {v}" for k, v in versions.items()))

    # Tokenizer straight from tokenizer.json, with its built-in truncation (128)
    # and fixed padding (128) switched off.
    tk = tokenizers.Tokenizer.from_file(os.path.join(model_dir, "tokenizer.json"))
    tk.no_padding()
    tk.no_truncation()
    CLS, SEP = tk.token_to_id("[CLS]"), tk.token_to_id("[SEP]")

    def ids_of(text: str) -> list[int]:
        return tk.encode(text).ids

    rows = build_pairs(lambda s: len(ids_of(s)))
    ids_seen = [r[0] for r in rows]
    assert len(ids_seen) == len(set(ids_seen)), "duplicate row ids"
    refs = [r[1] for r in rows]
    outs = [r[2] for r in rows]
    texts = sorted(set(refs) | set(outs))
    tok_ids = {t: ids_of(t) for t in texts}
    too_long = [(len(v), t[:60]) for t, v in tok_ids.items() if len(v) >= MAX_TOKENS]
    if too_long:
        log(f"texts at or over {MAX_TOKENS} word-pieces: {too_long}")
        return 1
    for t, v in tok_ids.items():
        assert v[0] == CLS and v[-1] == SEP and CLS not in v[1:-1] and SEP not in v[1:-1], t
    log(f"{len(rows)} rows, {len(texts)} distinct texts, "
        f"max {max(len(v) for v in tok_ids.values())} word-pieces, "
        f"{sum(1 for v in tok_ids.values() if len(v) > 128)} texts over 128")

    # The tokenizers bert_score and sentence-transformers use must agree with
    # tokenizer.json (what refscore loads).
    hf_tok = AutoTokenizer.from_pretrained(model_dir, use_fast=False)
    for t in texts:
        if t.strip():
            got = hf_tok.encode(t.strip(), add_special_tokens=True,
                                max_length=hf_tok.model_max_length, truncation=True)
            assert got == tok_ids[t], f"bert_score tokenizer disagrees on {t!r}"

    # ---- cosine: sentence-transformers -------------------------------------
    t0 = time.time()
    st = SentenceTransformer(model_dir, device="cpu")
    assert st.max_seq_length == MAX_TOKENS, st.max_seq_length
    st_tok = st.tokenizer(texts, truncation=True, max_length=st.max_seq_length)["input_ids"]
    for t, v in zip(texts, st_tok):
        assert list(v) == tok_ids[t], f"sentence-transformers tokenizer disagrees on {t!r}"
    emb = st.encode(texts, normalize_embeddings=True, batch_size=16,
                    convert_to_numpy=True, show_progress_bar=False)
    st_vec = {t: emb[i].astype(np.float64) for i, t in enumerate(texts)}
    cosine = [max(0.0, float(np.dot(st_vec[r], st_vec[o]))) for r, o in zip(refs, outs)]
    log(f"sentence-transformers cosine: {time.time() - t0:.1f}s")

    # ---- BERTScore: bert_score, batch_size=1 --------------------------------
    orig_sent_encode = bs_utils.sent_encode

    def sent_encode(tokenizer, sent):
        # bert_score 0.3.13 calls tokenizer.build_inputs_with_special_tokens([])
        # here, which transformers 5 removed; under transformers 4 it returned
        # [CLS] [SEP].
        if sent.strip() == "":
            return [tokenizer.cls_token_id, tokenizer.sep_token_id]
        return orig_sent_encode(tokenizer, sent)

    bs_utils.sent_encode = sent_encode

    def run_bert_score(idf: bool, batch_size: int = 1):
        P, R, F = bert_score.score(
            cands=outs, refs=refs, model_type=model_dir, num_layers=6,
            batch_size=batch_size, idf=idf, device="cpu", nthreads=0, verbose=False)
        return [float(x) for x in P], [float(x) for x in R], [float(x) for x in F]

    t0 = time.time()
    bs_plain = run_bert_score(False)
    bs_idf = run_bert_score(True)
    log(f"bert_score (2 runs, batch_size=1): {time.time() - t0:.1f}s")

    # ---- independent numpy implementation ----------------------------------
    t0 = time.time()
    model = AutoModel.from_pretrained(model_dir).eval()
    hidden: dict[str, np.ndarray] = {}
    with torch.no_grad():
        for t in texts:
            ids = torch.tensor([tok_ids[t]], dtype=torch.long)
            out = model(input_ids=ids, attention_mask=torch.ones_like(ids),
                        token_type_ids=torch.zeros_like(ids))
            hidden[t] = out.last_hidden_state[0].double().numpy()

    # cosine from mean pooling, against sentence-transformers
    def pooled(t):
        v = hidden[t].mean(axis=0)
        return v / np.linalg.norm(v)

    pooled_vec = {t: pooled(t) for t in texts}
    cos_np = [max(0.0, float(np.dot(pooled_vec[r], pooled_vec[o]))) for r, o in zip(refs, outs)]
    d_cos = max(abs(a - b) for a, b in zip(cosine, cos_np))

    unit = {t: h / np.linalg.norm(h, axis=1, keepdims=True) for t, h in hidden.items()}

    M = len(refs)
    df = Counter()
    for r in refs:
        df.update(set(tok_ids[r]))
    idf_w = {w: math.log((M + 1) / (c + 1)) for w, c in df.items()}

    def weights(t: str, use_idf: bool) -> np.ndarray:
        w = np.array([idf_w.get(i, math.log(M + 1)) if use_idf else 1.0 for i in tok_ids[t]])
        w[[k for k, i in enumerate(tok_ids[t]) if i in (CLS, SEP)]] = 0.0
        return w

    def formula(ref: str, out: str, use_idf: bool, raw: bool = False):
        sim = unit[out] @ unit[ref].T  # output tokens x reference tokens
        wc, wr = weights(out, use_idf), weights(ref, use_idf)
        with np.errstate(invalid="ignore", divide="ignore"):
            p = float((wc * sim.max(axis=1)).sum() / wc.sum())
            r = float((wr * sim.max(axis=0)).sum() / wr.sum())
        if raw:
            return p, r
        if wc.sum() == 0 or wr.sum() == 0:  # an empty text: everything 0
            return 0.0, 0.0, 0.0
        f = 2 * p * r / (p + r) if (p + r) != 0 else 0.0
        return p, r, f

    np_plain = [formula(r, o, False) for r, o in zip(refs, outs)]
    np_idf = [formula(r, o, True) for r, o in zip(refs, outs)]
    log(f"numpy reference implementation: {time.time() - t0:.1f}s")

    diffs = {}
    for name, bs, nv in (("plain", bs_plain, np_plain), ("idf", bs_idf, np_idf)):
        for k, metric in enumerate(("P", "R", "F1")):
            diffs[f"{metric}{'_idf' if name == 'idf' else ''}"] = max(
                abs(bs[k][i] - nv[i][k]) for i in range(len(rows)))
    worst = max(diffs.values())
    log("max |bert_score - numpy formula|: "
        + ", ".join(f"{k} {v:.3g}" for k, v in diffs.items()) + f"; overall {worst:.3g}")
    log(f"max |sentence-transformers cosine - numpy mean pooling|: {d_cos:.3g}")

    # Empty rows: what bert_score reports and what the raw formula gives.
    for i, (rid, r, o) in enumerate(rows):
        if not r.strip() or not o.strip():
            raw_p, raw_r = formula(r, o, False, raw=True)
            log(f"  {rid} ref={r!r} out={o!r}: bert_score P/R/F1 = "
                f"{bs_plain[0][i]:.4g}/{bs_plain[1][i]:.4g}/{bs_plain[2][i]:.4g} "
                f"(idf {bs_idf[0][i]:.4g}/{bs_idf[1][i]:.4g}/{bs_idf[2][i]:.4g}); "
                f"raw formula P={raw_p:.4g} R={raw_r:.4g}; cosine={cosine[i]:.4g}")

    if not args.skip_batched_demo:
        t0 = time.time()
        b64 = run_bert_score(False, batch_size=64)
        infl = [b64[2][i] - bs_plain[2][i] for i in range(len(rows))]
        log(f"for comparison, batch_size=64 F1 - batch_size=1 F1: max {max(infl):.4f}, "
            f"min {min(infl):.4f}, rows changed >1e-4: {sum(1 for x in infl if abs(x) > 1e-4)} "
            f"({time.time() - t0:.1f}s)")

    if worst > args.tolerance or d_cos > args.tolerance:
        log(f"FAILED: differences exceed tolerance {args.tolerance}")
        return 1

    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    tmp = args.out + ".tmp"
    with open(tmp, "w", encoding="utf-8", newline="\n") as f:
        for i, (rid, r, o) in enumerate(rows):
            obj = {
                "id": rid, "reference": r, "output": o, "cosine": cosine[i],
                "bertscore_precision": bs_plain[0][i], "bertscore_recall": bs_plain[1][i],
                "bertscore_f1": bs_plain[2][i],
                "bertscore_precision_idf": bs_idf[0][i], "bertscore_recall_idf": bs_idf[1][i],
                "bertscore_f1_idf": bs_idf[2][i],
                "ref_tokens": len(tok_ids[r]), "out_tokens": len(tok_ids[o]),
            }
            for k, v in obj.items():
                assert not (isinstance(v, float) and not math.isfinite(v)), (rid, k, v)
            f.write(json.dumps(obj, ensure_ascii=True) + "\n")
    os.replace(tmp, args.out)
    log(f"wrote {len(rows)} rows to {args.out} in {time.time() - t_start:.1f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
