#!/usr/bin/env python3
"""Generate the benchmark inputs for refscore's embedding metrics.

Writes two Parquet files (zstd) with string columns ``id``, ``reference`` and
``output`` into OUTDIR:

* ``nightly.parquet`` -- ROWS rows (default 20,000): ROWS/20 distinct references,
  each paired with 20 different outputs (so a reference text repeats 20 times,
  as in an evaluation of several models or samples against one gold set). Rows
  are shuffled, so the repeats of one reference are spread over the file.
* ``distinct.parquet`` -- ROWS rows with no repeated text at all: every
  reference and every output string occurs exactly once in the file (no output
  equals any reference either).

The texts read like answers to questions. Each reference is one of

* a short factual answer, 1-10 words (about half): a person, a place, a
  quantity with its unit, a date, a technical term, yes/no with a reason, or a
  short sentence;
* an explanation of 20-80 words (about a third), or
* a long answer of 120-200 words (the rest),

built from the English word lists and sentence frames below (medicine,
software, finance, history, ...). Outputs are variations of their reference:
exact copies, surface changes (case, punctuation, Markdown bullets),
paraphrases (other sentence structure plus synonym swaps), reordered
sentences, partial answers, wrong answers (other entity, changed number or
year, flipped verb or comparison, negation), added detail, hedges, verbose
answers and refusals. No text is longer than 200 words, and every text stays
below ~230 word-pieces of all-MiniLM-L6-v2's tokenizer (checked with the
``tokenizers`` package when it and the model's tokenizer.json are available;
the texts themselves never depend on that).

Deterministic: everything is drawn from ``random.Random(--seed)`` in a fixed
order, so the same arguments always give the same rows (the Parquet bytes may
still differ between pyarrow versions).

Usage:
    python3 scripts/make_bench_sets.py OUTDIR [--rows N] [--seed S]

Needs only pyarrow (plus, optionally, tokenizers for the length check).
"""

from __future__ import annotations

import argparse
import math
import os
import random
import re
import sys
from collections import Counter

OUTPUTS_PER_REFERENCE = 20
DEFAULT_ROWS = 20_000
DEFAULT_SEED = 20250101
MAX_WORDS = 200
MAX_PIECES = 230          # hard limit, checked with the real tokenizer if present
EST_PIECES_LIMIT = 205    # what the built-in estimator allows (it is within ~3% of the real count)
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# ---------------------------------------------------------------------------
# Word lists for the sentence frames. Subjects are singular (or mass nouns) so
# third-person verb forms work. Verbs are (base, 3rd person, past = participle).
# ---------------------------------------------------------------------------
TOPICS = [
    {
        "name": "medicine", "tense": "present",
        "subjects": ["the medication", "this antibiotic", "the vaccine", "the new treatment",
                     "a low-salt diet", "regular exercise", "the immune system", "the liver",
                     "the booster dose", "physical therapy", "the inhaler", "the drug",
                     "daily walking", "the surgery"],
        "verbs": [("reduce", "reduces", "reduced"), ("increase", "increases", "increased"),
                  ("prevent", "prevents", "prevented"), ("lower", "lowers", "lowered"),
                  ("relieve", "relieves", "relieved"), ("control", "controls", "controlled"),
                  ("improve", "improves", "improved"), ("affect", "affects", "affected"),
                  ("worsen", "worsens", "worsened"), ("raise", "raises", "raised")],
        "objects": ["blood pressure", "the risk of infection", "inflammation", "chronic pain",
                    "the symptoms", "blood sugar levels", "the heart rate", "muscle stiffness",
                    "the spread of the virus", "kidney function", "cholesterol levels",
                    "the chance of a relapse", "joint swelling", "lung capacity"],
        "conds": ["after meals", "during the first week", "in older adults", "within a few hours",
                  "when it is taken with food", "over several months", "in most patients",
                  "at higher doses", "in children", "after the second dose"],
        "actions": ["take the tablets with a full glass of water", "avoid alcohol during the treatment",
                    "check your blood pressure every morning", "finish the full course of antibiotics",
                    "store the vaccine in a refrigerator", "tell your doctor about other medicines",
                    "drink plenty of fluids", "rest for at least two days",
                    "keep the wound clean and dry", "take the dose at the same time each day"],
        "consequences": ["the symptoms may return", "side effects become more likely",
                         "the infection can spread", "the treatment may not work",
                         "the patient may need to stay in hospital longer",
                         "the medicine can lose its effect", "recovery usually takes longer"],
        "purposes": ["prevent serious complications", "reduce the chance of side effects",
                     "keep blood levels stable", "protect the stomach lining",
                     "treat bacterial infections", "control high blood pressure"],
        "measures": [("dose", "milligrams"), ("daily dose", "milligrams"), ("amount", "millilitres")],
        "amount_verb": "take",
        "freqs": ["twice a day", "once a day", "every eight hours", "three times a day",
                  "before bedtime", "every morning"],
        "who": ["adults", "most patients", "older patients", "children over twelve"],
        "aspects": ["side effects", "cost", "effectiveness", "how quickly it works", "safety"],
        "comps": [("safer", "riskier"), ("more effective", "less effective"),
                  ("cheaper", "more expensive"), ("faster", "slower")],
        "intro_subjects": ["the vaccine", "the new treatment", "the drug", "the inhaler",
                           "this antibiotic", "the screening programme"],
        "years": (1920, 2023),
        "intro": ["approved", "introduced", "developed", "first used"],
        "time_units": ["hours", "days", "weeks"],
    },
    {
        "name": "software", "tense": "present",
        "subjects": ["the cache", "the load balancer", "the database index", "the garbage collector",
                     "the scheduler", "the compiler", "the new release", "the retry policy",
                     "the connection pool", "the build system", "the firewall", "the query planner",
                     "the logging library", "the message queue"],
        "verbs": [("reduce", "reduces", "reduced"), ("increase", "increases", "increased"),
                  ("prevent", "prevents", "prevented"), ("slow down", "slows down", "slowed down"),
                  ("speed up", "speeds up", "sped up"), ("handle", "handles", "handled"),
                  ("limit", "limits", "limited"), ("improve", "improves", "improved"),
                  ("block", "blocks", "blocked"), ("store", "stores", "stored")],
        "objects": ["the response time", "memory usage", "the number of failed requests",
                    "duplicate messages", "disk writes", "network traffic", "the startup time",
                    "database queries", "unauthorised access", "lock contention",
                    "the size of the binary", "the error rate", "CPU usage", "page load times"],
        "conds": ["under heavy load", "in production", "on large inputs", "after a restart",
                  "during peak hours", "when the cache is warm", "on every request",
                  "for most workloads", "in the default configuration", "on older hardware"],
        "actions": ["back up the database before the upgrade", "rotate the access keys regularly",
                    "pin the versions of your dependencies", "run the test suite before merging",
                    "set a timeout on every network call", "monitor the memory usage",
                    "enable two-factor authentication", "keep the logs for at least thirty days",
                    "close the connections when you are done", "validate all user input"],
        "consequences": ["the service can run out of memory", "data may be lost",
                         "requests may time out", "attackers could gain access",
                         "the build can break without warning", "the logs become hard to read",
                         "the deployment may fail"],
        "purposes": ["reduce the latency of common requests", "avoid losing data during a crash",
                     "make the builds reproducible", "protect user accounts",
                     "spread the traffic across several servers", "catch errors early"],
        "measures": [("timeout", "seconds"), ("memory limit", "megabytes"),
                     ("batch size", "records"), ("retry limit", "attempts")],
        "amount_verb": "set",
        "freqs": ["per request", "per connection", "for each job", "per worker", "by default"],
        "who": ["most services", "small teams", "production systems", "new projects"],
        "aspects": ["latency", "memory use", "reliability", "ease of use", "throughput"],
        "comps": [("faster", "slower"), ("more reliable", "less reliable"),
                  ("simpler", "more complex"), ("more secure", "less secure")],
        "intro_subjects": ["the cache layer", "the retry policy", "the build system",
                           "the query planner", "the logging library", "the new API"],
        "years": (1975, 2023),
        "intro": ["released", "introduced", "added", "deprecated"],
        "time_units": ["milliseconds", "seconds", "minutes"],
    },
    {
        "name": "finance", "tense": "present",
        "subjects": ["the central bank", "a higher interest rate", "the new tax", "inflation",
                     "the pension fund", "the company", "the trade deficit", "the budget",
                     "the stock market", "a strong currency", "the loan", "the insurance policy"],
        "verbs": [("reduce", "reduces", "reduced"), ("increase", "increases", "increased"),
                  ("raise", "raises", "raised"), ("lower", "lowers", "lowered"),
                  ("affect", "affects", "affected"), ("limit", "limits", "limited"),
                  ("support", "supports", "supported"), ("weaken", "weakens", "weakened"),
                  ("strengthen", "strengthens", "strengthened"), ("cover", "covers", "covered")],
        "objects": ["consumer spending", "the cost of borrowing", "export prices", "household savings",
                    "the value of the currency", "monthly payments", "government debt",
                    "the price of imports", "long-term growth", "the unemployment rate",
                    "the return on investment", "property prices"],
        "conds": ["in the short term", "over the next year", "during a recession",
                  "for most households", "when prices are rising", "in the long run",
                  "after the first year", "in most countries"],
        "actions": ["pay off the credit card every month", "keep an emergency fund",
                    "compare the fees before you sign", "read the terms of the contract",
                    "spread your investments across several assets", "file the tax return on time",
                    "check the interest rate carefully", "keep all your receipts"],
        "consequences": ["you may have to pay a penalty", "the debt can grow quickly",
                         "the bank may refuse the loan", "you could lose money",
                         "the interest charges add up", "the claim may be rejected"],
        "purposes": ["keep inflation under control", "encourage people to save",
                     "reduce the budget deficit", "protect savers",
                     "support small businesses", "stabilise the currency"],
        "measures": [("interest rate", "percent"), ("monthly fee", "dollars"),
                     ("minimum deposit", "dollars"), ("tax rate", "percent")],
        "amount_verb": "expect",
        "freqs": ["per year", "per month", "for each account", "on average"],
        "who": ["most customers", "new customers", "small businesses", "savers"],
        "aspects": ["risk", "cost", "flexibility", "long-term return", "liquidity"],
        "comps": [("riskier", "safer"), ("cheaper", "more expensive"),
                  ("more flexible", "less flexible"), ("more profitable", "less profitable")],
        "intro_subjects": ["the new tax", "the pension fund", "the loan programme",
                           "the insurance policy", "the budget rule"],
        "years": (1900, 2023),
        "intro": ["introduced", "approved", "announced", "launched"],
        "time_units": ["months", "years", "weeks"],
    },
    {
        "name": "nutrition", "tense": "present",
        "subjects": ["the recipe", "whole grain bread", "the dough", "a balanced diet",
                     "fresh spinach", "olive oil", "the sauce", "brown rice", "the oven",
                     "dietary fibre", "green tea", "the marinade"],
        "verbs": [("contain", "contains", "contained"), ("improve", "improves", "improved"),
                  ("reduce", "reduces", "reduced"), ("increase", "increases", "increased"),
                  ("add", "adds", "added"), ("keep", "keeps", "kept"),
                  ("provide", "provides", "provided"), ("soften", "softens", "softened")],
        "objects": ["the amount of sugar", "vitamin C", "the flavour of the meat", "iron",
                    "digestion", "the texture of the bread", "energy levels", "protein",
                    "the cooking time", "the risk of heart disease", "moisture", "calories"],
        "conds": ["after cooking", "when it is stored in the fridge", "at room temperature",
                  "in small portions", "over a few days", "for most people",
                  "when it is eaten raw", "at high temperatures"],
        "actions": ["wash the vegetables before cooking", "preheat the oven",
                    "let the dough rest for an hour", "store the leftovers in the fridge",
                    "stir the sauce every few minutes", "measure the flour carefully",
                    "cook the chicken all the way through", "use fresh ingredients"],
        "consequences": ["the bread will not rise", "the sauce can burn",
                         "bacteria may grow", "the cake can collapse",
                         "the meat becomes tough", "the flavour is lost"],
        "purposes": ["keep the bread soft", "add flavour without extra salt",
                     "make the dish easier to digest", "preserve the vitamins",
                     "reduce the fat content", "help the dough rise"],
        "measures": [("amount of flour", "grams"), ("baking time", "minutes"),
                     ("serving", "grams"), ("amount of water", "millilitres")],
        "amount_verb": "use",
        "freqs": ["per loaf", "per serving", "for each portion", "per person"],
        "who": ["most recipes", "adults", "beginners", "professional bakers"],
        "aspects": ["taste", "nutrition", "price", "preparation time", "fibre content"],
        "comps": [("healthier", "less healthy"), ("cheaper", "more expensive"),
                  ("quicker to prepare", "slower to prepare"), ("richer in protein", "poorer in protein")],
        "intro_subjects": ["the recipe", "whole grain bread", "the marinade", "the sauce",
                           "the food label"],
        "years": (1850, 2023),
        "intro": ["introduced", "developed", "first described", "popularised"],
        "time_units": ["minutes", "hours", "days"],
    },
    {
        "name": "environment", "tense": "present",
        "subjects": ["deforestation", "the ocean", "solar power", "the new policy",
                     "air pollution", "the wetland", "wind energy", "the glacier",
                     "recycling", "the dam", "urban traffic", "the forest"],
        "verbs": [("reduce", "reduces", "reduced"), ("increase", "increases", "increased"),
                  ("absorb", "absorbs", "absorbed"), ("release", "releases", "released"),
                  ("protect", "protects", "protected"), ("threaten", "threatens", "threatened"),
                  ("damage", "damages", "damaged"), ("support", "supports", "supported")],
        "objects": ["carbon dioxide", "the number of species", "sea levels", "local rainfall",
                    "greenhouse gas emissions", "the soil", "drinking water", "fish populations",
                    "the average temperature", "coastal erosion", "energy costs", "biodiversity"],
        "conds": ["in tropical regions", "over the last century", "during the summer",
                  "in coastal areas", "in most cities", "over several decades",
                  "when temperatures rise", "in the northern hemisphere"],
        "actions": ["reduce the use of plastic", "plant native trees", "save water during droughts",
                    "sort the waste before recycling", "switch off unused lights",
                    "use public transport", "protect the remaining wetlands"],
        "consequences": ["more species will disappear", "the floods will get worse",
                         "the air quality will decline", "the soil can wash away",
                         "water shortages become more common", "emissions keep rising"],
        "purposes": ["cut carbon emissions", "protect endangered species", "reduce air pollution",
                     "store water for dry seasons", "slow down climate change"],
        "measures": [("emission limit", "tonnes"), ("rainfall", "millimetres"),
                     ("warming", "degrees Celsius")],
        "amount_verb": "expect",
        "freqs": ["per year", "per household", "each season", "on average"],
        "who": ["most countries", "large cities", "farmers", "factories"],
        "aspects": ["emissions", "cost", "reliability", "land use", "long-term impact"],
        "comps": [("cleaner", "dirtier"), ("cheaper", "more expensive"),
                  ("more reliable", "less reliable"), ("more efficient", "less efficient")],
        "intro_subjects": ["the new policy", "the carbon tax", "the recycling scheme",
                           "the emissions law", "the water plan"],
        "years": (1960, 2023),
        "intro": ["introduced", "adopted", "signed", "launched"],
        "time_units": ["years", "decades", "months"],
    },
    {
        "name": "support", "tense": "present",
        "subjects": ["the refund policy", "the warranty", "the subscription", "the support team",
                     "the free plan", "the mobile app", "the account", "the delivery service",
                     "the loyalty programme", "the return label"],
        "verbs": [("cover", "covers", "covered"), ("include", "includes", "included"),
                  ("allow", "allows", "allowed"), ("exclude", "excludes", "excluded"),
                  ("require", "requires", "required"), ("limit", "limits", "limited"),
                  ("support", "supports", "supported"), ("charge", "charges", "charged")],
        "objects": ["damaged items", "international shipping", "two user accounts",
                    "a one-year guarantee", "the cost of repairs", "cancellation at any time",
                    "a proof of purchase", "express delivery", "data export", "battery replacement"],
        "conds": ["within thirty days", "for premium customers", "after the trial ends",
                  "in most regions", "during the first year", "on weekends",
                  "for orders over fifty dollars", "at no extra cost"],
        "actions": ["keep the original receipt", "contact support within two weeks",
                    "update the app to the latest version", "check the tracking number",
                    "reset your password from the login page", "pack the item in its original box",
                    "cancel before the renewal date"],
        "consequences": ["the refund may be refused", "you will be charged again",
                         "the parcel can be returned to the sender", "the warranty becomes void",
                         "the account may be locked", "the request cannot be processed"],
        "purposes": ["make returns easier", "reduce waiting times", "protect customer data",
                     "simplify billing", "reward regular customers"],
        "measures": [("fee", "dollars"), ("waiting time", "minutes"), ("storage limit", "gigabytes")],
        "amount_verb": "expect",
        "freqs": ["per month", "per order", "per user", "per year"],
        "who": ["new customers", "most users", "business customers", "students"],
        "aspects": ["price", "features", "speed of delivery", "customer service", "flexibility"],
        "comps": [("cheaper", "more expensive"), ("faster", "slower"),
                  ("more flexible", "less flexible"), ("easier to use", "harder to use")],
        "intro_subjects": ["the refund policy", "the warranty", "the subscription",
                           "the free plan", "the mobile app", "the loyalty programme"],
        "years": (2000, 2023),
        "intro": ["introduced", "launched", "updated", "changed"],
        "time_units": ["days", "hours", "weeks"],
    },
    {
        "name": "physics", "tense": "present",
        "subjects": ["the magnetic field", "friction", "the battery", "the lens", "gravity",
                     "the engine", "the circuit", "air resistance", "the turbine", "the insulation",
                     "the transformer", "the spring"],
        "verbs": [("reduce", "reduces", "reduced"), ("increase", "increases", "increased"),
                  ("store", "stores", "stored"), ("convert", "converts", "converted"),
                  ("absorb", "absorbs", "absorbed"), ("produce", "produces", "produced"),
                  ("resist", "resists", "resisted"), ("transfer", "transfers", "transferred")],
        "objects": ["the speed of the object", "heat loss", "electrical energy", "the current",
                    "kinetic energy", "the pressure inside the tank", "the light", "vibrations",
                    "the voltage", "the temperature of the gas", "mechanical work", "sound waves"],
        "conds": ["at low temperatures", "in a vacuum", "at high speeds", "over long distances",
                  "when the load is high", "in most materials", "near the surface",
                  "under constant pressure"],
        "actions": ["disconnect the power before opening the case", "wear safety glasses",
                    "calibrate the sensor before each test", "keep the battery away from heat",
                    "measure the voltage twice", "tighten the bolts evenly"],
        "consequences": ["the circuit can overheat", "the results will be inaccurate",
                         "the battery may catch fire", "the part can break under load",
                         "someone could get hurt"],
        "purposes": ["reduce energy losses", "measure small currents", "keep the temperature constant",
                     "convert heat into work", "protect the circuit from surges"],
        "measures": [("voltage", "volts"), ("pressure", "kilopascals"), ("load", "kilograms"),
                     ("temperature", "degrees Celsius")],
        "amount_verb": "use",
        "freqs": ["per cycle", "per second", "at full load", "on average"],
        "who": ["most devices", "small engines", "household circuits", "students"],
        "aspects": ["efficiency", "weight", "cost", "durability", "energy density"],
        "comps": [("more efficient", "less efficient"), ("lighter", "heavier"),
                  ("stronger", "weaker"), ("cheaper", "more expensive")],
        "intro_subjects": ["the battery", "the lens", "the engine", "the turbine",
                           "the transformer"],
        "years": (1800, 2023),
        "intro": ["invented", "discovered", "first described", "patented"],
        "time_units": ["seconds", "minutes", "hours"],
    },
    {
        "name": "biology", "tense": "present",
        "subjects": ["the cell membrane", "the enzyme", "photosynthesis", "the hormone",
                     "the root system", "the bacterium", "the gene", "the mitochondrion",
                     "the nervous system", "the plant", "the predator", "the protein"],
        "verbs": [("produce", "produces", "produced"), ("control", "controls", "controlled"),
                  ("break down", "breaks down", "broke down"), ("absorb", "absorbs", "absorbed"),
                  ("regulate", "regulates", "regulated"), ("transport", "transports", "transported"),
                  ("increase", "increases", "increased"), ("reduce", "reduces", "reduced")],
        "objects": ["glucose", "water and minerals", "the growth of the plant", "oxygen",
                    "the body temperature", "harmful substances", "the number of offspring",
                    "energy for the cell", "signals between cells", "the rate of reactions",
                    "nutrients", "the population of prey"],
        "conds": ["in most animals", "during the day", "at the cellular level", "in warm conditions",
                  "in the presence of light", "when food is scarce", "in healthy adults",
                  "during development"],
        "actions": ["keep the samples at a low temperature", "label every test tube",
                    "wash your hands after handling the samples", "record the results immediately",
                    "water the seedlings every day"],
        "consequences": ["the enzyme stops working", "the cells can die",
                         "the experiment has to be repeated", "the results may be contaminated",
                         "the plants may wilt"],
        "purposes": ["store energy", "protect the cell", "speed up chemical reactions",
                     "control growth", "respond to changes in the environment"],
        "measures": [("temperature", "degrees Celsius"), ("sample volume", "millilitres")],
        "amount_verb": "use",
        "freqs": ["per sample", "per plant", "per test", "each day"],
        "who": ["most laboratories", "students", "researchers"],
        "aspects": ["size", "speed of growth", "energy use", "lifespan", "complexity"],
        "comps": [("larger", "smaller"), ("faster", "slower"),
                  ("more complex", "simpler"), ("more efficient", "less efficient")],
        "intro_subjects": ["the enzyme", "the hormone", "the gene", "the bacterium",
                           "the protein"],
        "years": (1850, 2023),
        "intro": ["discovered", "first described", "identified", "named"],
        "time_units": ["minutes", "hours", "days"],
    },
    {
        "name": "history", "tense": "past",
        "subjects": ["the treaty", "the new constitution", "the railway", "the trade agreement",
                     "the king", "the parliament", "the reform", "the revolution", "the empire",
                     "the printing press", "the war", "the plague", "the new government",
                     "the council"],
        "verbs": [("end", "ends", "ended"), ("establish", "establishes", "established"),
                  ("weaken", "weakens", "weakened"), ("expand", "expands", "expanded"),
                  ("limit", "limits", "limited"), ("replace", "replaces", "replaced"),
                  ("strengthen", "strengthens", "strengthened"), ("abolish", "abolishes", "abolished"),
                  ("unite", "unites", "united"), ("restore", "restores", "restored")],
        "objects": ["the power of the monarchy", "trade between the two countries",
                    "the old tax system", "the northern provinces", "the right to vote",
                    "the army", "local governments", "religious freedom", "the city walls",
                    "the price of grain", "the influence of the church", "slavery"],
        "conds": ["in the early nineteenth century", "after the war", "within a decade",
                  "during the reign of the king", "in the following years", "by the end of the century",
                  "in most regions", "after years of negotiation"],
        "consequences": [],
        "actions": [],
        "purposes": ["end the long conflict", "raise money for the army", "unite the provinces",
                     "limit the power of the nobles", "improve trade with the colonies",
                     "give more people the right to vote"],
        "measures": [],
        "amount_verb": "",
        "freqs": [],
        "who": [],
        "aspects": ["population", "military strength", "wealth", "territory", "influence"],
        "comps": [("more powerful", "weaker"), ("larger", "smaller"),
                  ("richer", "poorer"), ("more stable", "less stable")],
        "intro_subjects": ["the treaty", "the new constitution", "the trade agreement",
                           "the reform", "the new law", "the salt tax"],
        "years": (1450, 1920),
        "intro": ["signed", "adopted", "approved", "introduced"],
        "time_units": ["years", "months", "decades"],
    },
]

# Verbs with an opposite, for wrong answers.
ANTONYM_VERBS = {
    "reduce": "increase", "increase": "reduce", "lower": "raise", "raise": "lower",
    "prevent": "cause", "improve": "worsen", "worsen": "improve", "weaken": "strengthen",
    "strengthen": "weaken", "slow down": "speed up", "speed up": "slow down",
    "absorb": "release", "release": "absorb", "protect": "damage", "damage": "protect",
    "include": "exclude", "exclude": "include", "expand": "limit", "limit": "expand",
    "abolish": "restore", "restore": "abolish", "allow": "block", "block": "allow",
}
VERB_FORMS = {v[0]: v for t in TOPICS for v in t["verbs"]}
VERB_FORMS["cause"] = ("cause", "causes", "caused")

# Word-level synonyms used by paraphrases (applied to whole words, first letter's
# case kept). Multi-word keys are matched as phrases.
SYNONYMS = {
    "reduces": ["lowers", "decreases", "cuts"], "reduce": ["lower", "decrease", "cut"],
    "reduced": ["lowered", "decreased"], "increases": ["raises", "boosts"],
    "increase": ["raise", "boost"], "increased": ["raised", "boosted"],
    "important": ["essential", "crucial", "vital"], "because": ["since", "as"],
    "Because": ["Since", "As"], "recommended": ["suggested", "advised", "usual"],
    "usual": ["typical", "normal"], "around": ["about", "roughly"], "quickly": ["rapidly", "fast"],
    "medication": ["medicine", "drug"], "symptoms": ["signs"], "doctor": ["physician"],
    "children": ["kids"], "company": ["firm", "business"], "customers": ["clients"],
    "error": ["failure"], "requests": ["calls"], "improves": ["enhances", "boosts"],
    "improve": ["enhance"], "prevents": ["stops", "avoids"], "prevent": ["stop", "avoid"],
    "controls": ["regulates", "manages"], "handles": ["deals with", "manages"],
    "contains": ["has", "includes"], "provides": ["gives", "supplies"],
    "protects": ["shields", "safeguards"], "protect": ["shield", "safeguard"],
    "damages": ["harms"], "threatens": ["endangers"], "allows": ["permits", "lets you have"],
    "requires": ["needs"], "limits": ["restricts", "caps"],
    "ended": ["finished", "brought an end to"], "established": ["set up", "created"],
    "weakened": ["undermined"], "expanded": ["extended", "enlarged"],
    "replaced": ["superseded"], "abolished": ["ended", "did away with"],
    "united": ["joined", "brought together"], "restored": ["brought back", "reinstated"],
    "otherwise": ["or else"], "For example": ["For instance", "As an example"],
    "within": ["in"], "mainly": ["mostly", "chiefly", "largely"],
    "Make sure to": ["Be sure to", "Remember to"], "You should": ["You ought to", "It is best to"],
    "It is important to": ["It is essential to", "You need to", "Always"],
    "in most cases": ["usually", "typically"], "several": ["a number of", "a few"],
    "large": ["big"], "common": ["frequent"], "cheaper": ["less costly"],
    "faster": ["quicker"], "safer": ["less risky"], "stronger": ["more robust"],
    "larger": ["bigger"], "simpler": ["less complicated"],
    "introduced": ["brought in", "launched"], "approved": ["authorised", "cleared"],
    "developed": ["created", "designed"], "signed": ["concluded"], "founded": ["established"],
    "adopted": ["accepted", "taken up"], "discovered": ["found"], "invented": ["created"],
    "first described": ["first documented"], "released": ["shipped", "published"],
    "each": ["every"], "store": ["keep"],
    "stores": ["keeps", "holds"], "produces": ["generates", "creates"],
    "converts": ["turns", "transforms"], "absorbs": ["takes up", "soaks up"],
    "transports": ["carries", "moves"], "regulates": ["controls"],
    "breaks down": ["decomposes", "splits"], "covers": ["includes"], "include": ["cover"],
    "includes": ["covers", "comes with"], "charges": ["bills for"],
    "supports": ["backs", "helps"], "affects": ["influences", "has an effect on"],
    "affect": ["influence"], "worsens": ["aggravates"], "relieves": ["eases"],
    "relieve": ["ease"], "raises": ["increases", "pushes up"], "lowers": ["reduces", "brings down"],
    "so": ["therefore"], "which means that": ["so that", "meaning that"],
    "when it comes to": ["regarding", "with respect to"], "in terms of": ["regarding"],
}

HEDGE_PREFIXES = ["I think ", "I believe ", "It is possible that ", "As far as I know, ",
                  "I'm not completely sure, but ", "If I remember correctly, ", "It seems that ",
                  "Generally speaking, ", "From what I understand, ", "To my knowledge, "]
HEDGE_SUFFIXES = ["However, I am not completely sure about this.",
                  "This may not be accurate in every case.",
                  "Please check this with an expert.", "But I could be wrong.",
                  "This depends on the specific situation.",
                  "You may want to verify this with an official source."]
OPENERS = ["Sure. ", "Good question. ", "Here is the answer. ", "In short: ", "To answer your question, ",
           "Based on the available information, ", "Great question! ", "According to the documentation, "]
REFUSALS = ["I don't know.", "I'm not able to answer that question.",
            "There is not enough information to answer this.", "Sorry, I cannot help with that.",
            "I am not sure.", "I don't have enough context to answer.",
            "Unfortunately, I don't know the answer to this question.", "No answer available.",
            "I cannot determine that from the information given."]

# ---------------------------------------------------------------------------
# Short factual answers.
# ---------------------------------------------------------------------------
FAMOUS = [("Marie Curie", "physicist"), ("Albert Einstein", "physicist"),
          ("Isaac Newton", "mathematician"), ("Charles Darwin", "naturalist"),
          ("Ada Lovelace", "mathematician"), ("Leonardo da Vinci", "painter"),
          ("William Shakespeare", "playwright"), ("Jane Austen", "novelist"),
          ("Nelson Mandela", "president"), ("Alan Turing", "mathematician"),
          ("Galileo Galilei", "astronomer"), ("Louis Pasteur", "chemist"),
          ("Florence Nightingale", "nurse"), ("Nikola Tesla", "inventor"),
          ("Rosalind Franklin", "chemist"), ("Johannes Gutenberg", "printer"),
          ("Wolfgang Amadeus Mozart", "composer"), ("Ludwig van Beethoven", "composer"),
          ("Abraham Lincoln", "president"), ("Mahatma Gandhi", "lawyer"),
          ("Frida Kahlo", "painter"), ("Gregor Mendel", "scientist"),
          ("Dmitri Mendeleev", "chemist"), ("Alexander Fleming", "biologist"),
          ("Napoleon Bonaparte", "emperor"), ("Julius Caesar", "general"),
          ("Thomas Edison", "inventor"), ("Marco Polo", "explorer"),
          ("Christopher Columbus", "explorer"), ("Vincent van Gogh", "painter"),
          ("Pablo Picasso", "painter"), ("Sigmund Freud", "psychologist"),
          ("Niels Bohr", "physicist"), ("Johann Sebastian Bach", "composer"),
          ("Winston Churchill", "prime minister"), ("George Washington", "president"),
          ("Charles Dickens", "novelist"), ("Michelangelo Buonarroti", "sculptor"),
          ("Copernicus", "astronomer"), ("Aristotle", "philosopher")]
FIRST_NAMES = ["Maria", "James", "Ahmed", "Yuki", "Elena", "David", "Priya", "Lucas", "Fatima",
               "Thomas", "Chen", "Sofia", "Daniel", "Amara", "Oliver", "Ingrid", "Carlos",
               "Hannah", "Kwame", "Laura", "Mateo", "Nadia", "Peter", "Rosa", "Samuel", "Tara",
               "Victor", "Zara", "Anna", "Benjamin", "Clara", "Erik", "Grace", "Henry", "Isabel",
               "Jonas", "Katherine", "Leo", "Mei", "Nathan", "Olga", "Paul", "Rachel", "Stefan",
               "Teresa", "William", "Alice", "George", "Helen", "Martin"]
LAST_NAMES = ["Schmidt", "Okafor", "Tanaka", "Rossi", "Johnson", "Kowalski", "Haddad", "Nguyen",
              "Silva", "Andersen", "Petrov", "Garcia", "Fischer", "Kim", "Novak", "Brown",
              "Dubois", "Larsen", "Moreno", "Patel", "Sato", "Walker", "Young", "Bauer", "Costa",
              "Jensen", "Khan", "Lopez", "Meyer", "Nakamura", "Park", "Quinn", "Reyes", "Santos",
              "Taylor", "Varga", "Weber", "Zhang", "Hughes", "Becker", "Fernandez", "Morris",
              "Lindqvist", "Adeyemi", "Hoffman", "Martin", "Clarke", "Russo", "Ali", "Evans"]
PROFESSIONS = ["chemist", "engineer", "historian", "architect", "economist", "novelist",
               "biologist", "mathematician", "surgeon", "astronomer", "composer", "journalist",
               "physician", "geologist", "inventor", "diplomat"]
CAPITALS = [("Paris", "France"), ("Berlin", "Germany"), ("Madrid", "Spain"), ("Rome", "Italy"),
            ("Lisbon", "Portugal"), ("Vienna", "Austria"), ("Warsaw", "Poland"),
            ("Prague", "the Czech Republic"), ("Budapest", "Hungary"), ("Athens", "Greece"),
            ("Oslo", "Norway"), ("Stockholm", "Sweden"), ("Helsinki", "Finland"),
            ("Copenhagen", "Denmark"), ("Dublin", "Ireland"), ("London", "the United Kingdom"),
            ("Amsterdam", "the Netherlands"), ("Brussels", "Belgium"), ("Bern", "Switzerland"),
            ("Ottawa", "Canada"), ("Washington, D.C.", "the United States"),
            ("Mexico City", "Mexico"), ("Lima", "Peru"), ("Bogota", "Colombia"),
            ("Santiago", "Chile"), ("Buenos Aires", "Argentina"), ("Brasilia", "Brazil"),
            ("Cairo", "Egypt"), ("Nairobi", "Kenya"), ("Accra", "Ghana"), ("Abuja", "Nigeria"),
            ("Addis Ababa", "Ethiopia"), ("Pretoria", "South Africa"), ("Rabat", "Morocco"),
            ("Ankara", "Turkey"), ("Tehran", "Iran"), ("Riyadh", "Saudi Arabia"),
            ("New Delhi", "India"), ("Islamabad", "Pakistan"), ("Dhaka", "Bangladesh"),
            ("Bangkok", "Thailand"), ("Hanoi", "Vietnam"), ("Jakarta", "Indonesia"),
            ("Manila", "the Philippines"), ("Seoul", "South Korea"), ("Tokyo", "Japan"),
            ("Beijing", "China"), ("Canberra", "Australia"), ("Wellington", "New Zealand"),
            ("Kyiv", "Ukraine"), ("Bucharest", "Romania"), ("Sofia", "Bulgaria"),
            ("Reykjavik", "Iceland"), ("Havana", "Cuba"), ("Kathmandu", "Nepal"), ("Doha", "Qatar")]
RIVERS = ["Nile", "Amazon", "Danube", "Rhine", "Mississippi", "Yangtze", "Ganges", "Thames",
          "Volga", "Mekong", "Congo", "Niger", "Seine", "Zambezi", "Colorado", "Loire", "Elbe",
          "Tigris", "Euphrates", "Indus"]
MOUNTAINS = ["Everest", "Kilimanjaro", "Mont Blanc", "Denali", "Aconcagua", "Elbrus", "Fuji",
             "Olympus", "Etna", "Vesuvius"]
UNITS = ["kilometres", "metres", "kilograms", "litres", "degrees Celsius", "percent", "years",
         "hours", "minutes", "days", "million people", "billion dollars", "square kilometres",
         "calories", "milligrams", "volts", "light-years", "grams", "seconds", "tonnes"]
UNIT_ABBREV = {"kilometres": "km", "metres": "m", "kilograms": "kg", "litres": "L",
               "degrees Celsius": "°C", "percent": "%", "hours": "h", "minutes": "min",
               "milligrams": "mg", "grams": "g", "seconds": "s", "square kilometres": "km²",
               "volts": "V", "million people": "million", "billion dollars": "billion"}
MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August",
          "September", "October", "November", "December"]
NUMBER_WORDS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine",
                "ten", "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen",
                "seventeen", "eighteen", "nineteen", "twenty"]
TERM_GROUPS = [
    (["chronic", "acute", "viral", "bacterial", "seasonal", "allergic", "mild", "severe"],
     ["bronchitis", "sinusitis", "migraine", "dermatitis", "hepatitis", "anemia", "asthma",
      "pneumonia", "gastritis", "kidney disease", "heart failure", "arthritis"], "condition"),
    (["binary", "balanced", "hash", "priority", "circular", "sparse", "linked", "distributed",
      "relational", "immutable"],
     ["search tree", "table", "queue", "buffer", "list", "matrix", "database", "cache", "graph",
      "index", "array", "lock"], "data structure"),
    (["fixed", "variable", "annual", "compound", "nominal", "real", "marginal", "average"],
     ["interest rate", "cost", "income", "tax rate", "growth rate", "exchange rate",
      "price index", "return"], "financial term"),
    (["igneous", "sedimentary", "volcanic", "metamorphic", "coastal", "glacial"],
     ["rock", "basin", "plateau", "valley", "lake", "soil", "ridge"], "geological feature"),
]
TERMS = ["photosynthesis", "mitochondria", "osmosis", "plate tectonics", "natural selection",
         "the greenhouse effect", "nuclear fusion", "electromagnetic induction",
         "the water cycle", "cellular respiration", "supply and demand", "compound interest",
         "inflation", "the Krebs cycle", "DNA replication", "the Doppler effect",
         "Newton's third law", "the speed of light", "carbon dioxide", "nitrogen",
         "sodium chloride", "hydrochloric acid", "the Treaty of Versailles",
         "the Industrial Revolution", "the Magna Carta", "the Cold War", "the Renaissance",
         "the Roman Empire", "the French Revolution", "oxygen", "helium", "the pancreas",
         "the hippocampus", "insulin", "haemoglobin", "a black hole", "a neutron star"]
WRAPPERS = ["The answer is {x}.", "It's {x}.", "{x}.", "That would be {x}.", "Answer: {x}",
            "The correct answer is {x}.", "{x} is the answer.", "It is {x}.", "**{x}**",
            "Final answer: {x}", "The short answer is {x}.", "{x}, definitely.",
            "I would say {x}.", "{x} - that is the answer.", "Correct answer: {x}."]
SENTENCE_WRAPPERS = ["{x}.", "Answer: {x}.", "Well, {x}.", "Short answer: {x}.",
                     "{x}, as far as I know.", "{x}!", "So, {x}.", "The answer: {x}.",
                     "Simply put, {x}.", "{x} - that is the answer.", "To answer briefly, {x}."]
SENTENCE_HEDGES = ["I think {x}.", "{x}, but I'm not sure.", "Probably {x}.",
                   "I believe {x}, although I could be wrong.", "It seems that {x}.",
                   "If I remember correctly, {x}.", "Maybe {x}, or maybe not."]
SHORT_HEDGES = ["Probably {x}.", "I think it's {x}, but I'm not sure.", "Maybe {x}?",
                "It might be {x}.", "I'm not certain, but possibly {x}.", "Either {x} or {w}.",
                "It could be {x} or {w}.", "If I remember correctly, {x}.",
                "Possibly {x}, although {w} is also mentioned.", "Most likely {x}."]
SOURCES = ["the available information", "most sources", "standard references",
           "what I know", "the textbook definition", "historical records"]

# First words of names (kept capitalised by decap()).
PROPER = set(FIRST_NAMES) | set(LAST_NAMES) | set(MONTHS) | {"Mount", "Mt", "Dr", "Newton's", "Krebs"}
PROPER.update(n.split()[0] for n, _ in FAMOUS)
PROPER.update(w.split()[0] for c in CAPITALS for w in c if not w.startswith("the "))
PROPER.update(w.split()[0] for w in RIVERS + MOUNTAINS)

WORD_RE = re.compile(r"\S+")


def n_words(text: str) -> int:
    return len(WORD_RE.findall(text))


def est_pieces(text: str) -> int:
    """A deliberately pessimistic estimate of BERT word-pieces (without [CLS]/[SEP])."""
    n = 0
    for tok in re.findall(r"[A-Za-z]+|\d+|[^\sA-Za-z\d]", text):
        if tok.isdigit():
            n += 1 + len(tok) // 4
        elif tok[0].isalpha():
            n += 1 if len(tok) <= 8 else 2
        else:
            n += 1
    return n + 2


def cap(s: str) -> str:
    return s[:1].upper() + s[1:] if s else s


def decap(s: str) -> str:
    """Lower-case the first letter unless the text starts with a name, "I" or an acronym."""
    if not s:
        return s
    first = s.split(" ", 1)[0].rstrip(",.;:!?")
    if (first in PROPER or first in ("I", "I'm") or (len(first) > 1 and first.isupper())
            or re.fullmatch(r"[A-Z]\.", s.split(" ", 1)[0])):
        return s
    return s[:1].lower() + s[1:]


# ---------------------------------------------------------------------------
# Sentence frames for explanations.
# ---------------------------------------------------------------------------
FRAME_REALIZATIONS = {"effect": 3, "cause": 4, "amount": 4, "year": 3, "advice": 4,
                      "example": 3, "compare": 4}


def new_frame(rng: random.Random, ti: int) -> dict:
    t = TOPICS[ti]
    kinds = ["effect", "effect", "cause", "year", "example", "compare"]
    if t["actions"]:
        kinds += ["advice", "advice"]
    if t["measures"]:
        kinds += ["amount", "amount"]
    kind = rng.choice(kinds)
    f = {"kind": kind, "topic": ti, "r": rng.randrange(FRAME_REALIZATIONS[kind]), "neg": False}
    if kind == "effect":
        f.update(subj=rng.choice(t["subjects"]), verb=rng.choice(t["verbs"])[0],
                 obj=rng.choice(t["objects"]), cond=rng.choice(t["conds"]))
    elif kind == "cause":
        s1, s2 = rng.sample(t["subjects"], 2)
        o1, o2 = rng.sample(t["objects"], 2)
        f.update(subj=s1, verb=rng.choice(t["verbs"])[0], obj=o1,
                 subj2=s2, verb2=rng.choice(t["verbs"])[0], obj2=o2)
    elif kind == "amount":
        measure, unit = rng.choice(t["measures"])
        num = rng.choice([rng.randint(2, 20), rng.randint(2, 20) * 5, rng.randint(1, 40) * 25,
                          rng.choice([0.5, 1.5, 2.5, 7.5])])
        f.update(measure=measure, unit=unit, num=num, freq=rng.choice(t["freqs"]),
                 who=rng.choice(t["who"]))
    elif kind == "year":
        lo, hi = t["years"]
        f.update(subj=rng.choice(t["intro_subjects"]), iv=rng.choice(t["intro"]),
                 year=rng.randint(lo, hi), purpose=rng.choice(t["purposes"]))
    elif kind == "advice":
        f.update(action=rng.choice(t["actions"]), conseq=rng.choice(t["consequences"]))
    elif kind == "example":
        f.update(subj=rng.choice(t["subjects"]), verb=rng.choice(t["verbs"])[0],
                 obj=rng.choice(t["objects"]), num=rng.randint(2, 48),
                 tu=rng.choice(t["time_units"]))
    elif kind == "compare":
        s1, s2 = rng.sample(t["subjects"], 2)
        pair = rng.choice(t["comps"])
        f.update(subj=s1, subj2=s2, comp=pair[0], opp=pair[1], aspect=rng.choice(t["aspects"]))
    return f


def fmt_num(x) -> str:
    if isinstance(x, float):
        return f"{x:g}"
    return f"{x:,}"


def is_plural(noun_phrase: str) -> bool:
    head = re.split(r" (?:of|between|to|at|for|on|inside) ", noun_phrase)[0]
    if " and " in head:
        return True
    last = head.split()[-1]
    return last.endswith("s") and last not in ("virus", "gas", "species", "glucose")


def verb_phrase(verb: str, tense: str, neg: bool) -> str:
    base, s3, past = VERB_FORMS[verb]
    if tense == "past":
        return f"did not {base}" if neg else past
    return f"does not {base}" if neg else s3


def render_frame(f: dict) -> str:
    t = TOPICS[f["topic"]]
    past = t["tense"] == "past"
    k, r, neg = f["kind"], f["r"], f["neg"]
    if k == "effect":
        v = verb_phrase(f["verb"], t["tense"], neg)
        pp = VERB_FORMS[f["verb"]][2]
        plural = is_plural(f["obj"])
        be = ("were" if plural else "was") if past else ("are" if plural else "is")
        be += " not" if neg else ""
        if r == 0:
            return f"{cap(f['subj'])} {v} {f['obj']} {f['cond']}."
        if r == 1:
            return f"{cap(f['cond'])}, {f['subj']} {v} {f['obj']}."
        return f"{cap(f['obj'])} {be} {pp} by {f['subj']} {f['cond']}."
    if k == "cause":
        v1 = verb_phrase(f["verb"], t["tense"], False)
        v2 = verb_phrase(f["verb2"], t["tense"], neg)
        a = f"{f['subj']} {v1} {f['obj']}"
        b = f"{f['subj2']} {v2} {f['obj2']}"
        if r == 0:
            return f"Because {a}, {b}."
        if r == 1:
            return f"{cap(b)} because {a}."
        if r == 2:
            return f"{cap(a)}, so {b}."
        return f"{cap(a)}, which means that {b}."
    if k == "amount":
        n = fmt_num(f["num"])
        av = t["amount_verb"]
        if neg:  # only produced by wrong answers: a different figure is simpler; keep grammar
            return f"There is no fixed {f['measure']}; {f['who']} can {av} any amount {f['freq']}."
        if r == 0:
            return f"The recommended {f['measure']} is {n} {f['unit']} {f['freq']}."
        if r == 1:
            return f"{cap(f['who'])} should {av} {n} {f['unit']} {f['freq']}."
        if r == 2:
            return f"{cap(av)} about {n} {f['unit']} {f['freq']}."
        return f"The usual {f['measure']} is around {n} {f['unit']} {f['freq']}."
    if k == "year":
        nt = " not" if neg else ""
        if r == 0:
            return f"{cap(f['subj'])} was{nt} {f['iv']} in {f['year']} to {f['purpose']}."
        if r == 1:
            return f"In {f['year']}, {f['subj']} was{nt} {f['iv']} to {f['purpose']}."
        return f"{cap(f['subj'])} was{nt} {f['iv']} in {f['year']}, mainly to {f['purpose']}."
    if k == "advice":
        if neg:
            return ["It is not necessary to {a}; {c} only in rare cases.",
                    "You do not need to {a}.",
                    "There is no need to {a}, even though some people say {c}.",
                    "You can skip the step to {a}; nothing bad happens."][r].format(
                        a=f["action"], c=f["conseq"])
        return ["It is important to {a}; otherwise, {c}.", "Make sure to {a}, or {c}.",
                "If you do not {a}, {c}.", "You should {a}, because otherwise {c}."][r].format(
                    a=f["action"], c=f["conseq"])
    if k == "example":
        base, _, pp = VERB_FORMS[f["verb"]]
        can = "could" if past else "can"
        if neg:
            can = "could not" if past else "cannot"
        tu = f["tu"] if f["num"] != 1 else f["tu"].rstrip("s")
        if r == 0:
            return f"For example, {f['subj']} {can} {base} {f['obj']} within {f['num']} {tu}."
        if r == 1:
            return f"{cap(f['subj'])} {can}, for instance, {base} {f['obj']} in {f['num']} {tu}."
        return f"As an example, {f['obj']} {can} be {pp} by {f['subj']} within {f['num']} {tu}."
    if k == "compare":
        be = "was" if past else "is"
        comp = f["opp"] if neg else f["comp"]
        opp = f["comp"] if neg else f["opp"]
        if r == 0:
            return f"{cap(f['subj'])} {be} {comp} than {f['subj2']} in terms of {f['aspect']}."
        if r == 1:
            return f"In terms of {f['aspect']}, {f['subj']} {be} {comp} than {f['subj2']}."
        if r == 2:
            return f"Compared with {f['subj2']}, {f['subj']} {be} {comp} when it comes to {f['aspect']}."
        return f"{cap(f['subj2'])} {be} {opp} than {f['subj']} in terms of {f['aspect']}."
    raise ValueError(k)


def render(frames: list[dict]) -> str:
    return " ".join(render_frame(f) for f in frames)


_SYN_KEYS = sorted(SYNONYMS, key=lambda s: (-len(s), s))
_SYN_RE = re.compile(r"\b(" + "|".join(re.escape(k) for k in _SYN_KEYS) + r")\b")


def swap_synonyms(text: str, rng: random.Random, p: float) -> str:
    def repl(m: re.Match) -> str:
        w = m.group(0)
        if rng.random() >= p:
            return w
        return rng.choice(SYNONYMS[w])
    return _SYN_RE.sub(repl, text)


def corrupt_frame(f: dict, rng: random.Random) -> dict:
    """A copy of the frame that says something false."""
    g = dict(f)
    t = TOPICS[f["topic"]]
    k = f["kind"]
    choice = rng.random()
    if k in ("effect", "example"):
        if choice < 0.45 and f["verb"] in ANTONYM_VERBS:
            g["verb"] = ANTONYM_VERBS[f["verb"]]
        elif choice < 0.75:
            g["neg"] = not f["neg"]
        elif k == "example":
            g["num"] = f["num"] * rng.choice([2, 3, 10]) + rng.randint(1, 5)
        else:
            g["obj"] = rng.choice([o for o in t["objects"] if o != f["obj"]])
    elif k == "cause":
        if choice < 0.5 and f["verb2"] in ANTONYM_VERBS:
            g["verb2"] = ANTONYM_VERBS[f["verb2"]]
        elif choice < 0.7:
            g["neg"] = not f["neg"]
        else:
            g["obj2"] = rng.choice([o for o in t["objects"] if o not in (f["obj"], f["obj2"])])
    elif k == "amount":
        if choice < 0.85:
            num = f["num"]
            new = num * rng.choice([2, 3, 10]) if choice < 0.5 else (
                num / 2 if isinstance(num, float) or num % 2 else num // 2)
            if new == num:
                new = num + rng.randint(1, 9)
            g["num"] = new
        else:
            g["neg"] = True
    elif k == "year":
        if choice < 0.7:
            g["year"] = f["year"] + rng.choice([-1, 1]) * rng.randint(1, 60)
        elif choice < 0.85:
            g["purpose"] = rng.choice([p for p in t["purposes"] if p != f["purpose"]])
        else:
            g["neg"] = True
    elif k in ("advice", "compare"):
        g["neg"] = not f["neg"]
    return g


# ---------------------------------------------------------------------------
# Answers.
# ---------------------------------------------------------------------------
class LongAnswer:
    """An explanation: a list of sentence frames from one topic."""

    def __init__(self, frames: list[dict]):
        self.frames = frames
        self.text = render(frames)

    @property
    def topic(self) -> int:
        return self.frames[0]["topic"]


def make_long(rng: random.Random, lo: int, hi: int) -> LongAnswer:
    ti = rng.randrange(len(TOPICS))
    target = rng.randint(lo, hi)
    frames: list[dict] = []
    words = 0
    tries = 0
    while words < target and tries < 200:
        tries += 1
        f = new_frame(rng, ti)
        s = render_frame(f)
        if any(render_frame(g) == s for g in frames):
            continue
        w = n_words(s)
        if words + w > hi:
            if words >= lo:
                break
            continue
        frames.append(f)
        words += w
    ans = LongAnswer(frames)
    while est_pieces(ans.text) > EST_PIECES_LIMIT and len(frames) > 1:
        frames = frames[:-1]
        ans = LongAnswer(frames)
    return ans


class ShortAnswer:
    """A short factual answer with ready-made aliases, wrong answers and details."""

    def __init__(self, text: str, aliases: list[str], wrongs: list[str], details: list[str]):
        self.text = text
        self.aliases = [a for a in aliases if a and a != text]
        self.wrongs = [w for w in wrongs if w and w != text]
        self.details = [d for d in details if d and d != text]
        # "It takes about 3 days." / "Yes, ..." rather than a noun phrase like "Paris"
        self.sentence = text.endswith(".") and n_words(text) >= 3


def person_name(rng: random.Random) -> tuple[str, str]:
    if rng.random() < 0.3:
        return rng.choice(FAMOUS)
    return f"{rng.choice(FIRST_NAMES)} {rng.choice(LAST_NAMES)}", rng.choice(PROFESSIONS)


def short_person(rng: random.Random) -> ShortAnswer:
    name, prof = person_name(rng)
    parts = name.split()
    others = [person_name(rng)[0] for _ in range(3)]
    wrongs = [o for o in others if o != name]
    if len(parts) > 1:
        wrongs.append(f"{parts[0]} {rng.choice(LAST_NAMES)}")
    year = rng.randint(1500, 1990)
    form = rng.random()
    if form < 0.6:
        text = name
    elif form < 0.8:
        text = f"It was {name}."
    else:
        text = f"{name}, the {prof}"
    aliases = [parts[-1], f"{parts[0][0]}. {parts[-1]}" if len(parts) > 1 else name,
               name, f"Dr. {parts[-1]}", name.lower()]
    details = [f"{name}, the {prof}.", f"{name}, who was born in {year}.",
               f"It was {name}, a well-known {prof}.", f"{name} ({year})",
               f"The {prof} {name}.", f"{name}, a {prof} who worked on this in the {year // 10 * 10}s."]
    return ShortAnswer(text, aliases, wrongs, details)


def short_place(rng: random.Random) -> ShortAnswer:
    city, country = rng.choice(CAPITALS)
    other_city, other_country = rng.choice([c for c in CAPITALS if c[0] != city])
    kind = rng.random()
    if kind < 0.5:
        text = rng.choice([city, f"{city}, {cap(country)}", f"The capital is {city}.",
                           f"{city}, the capital of {country}"])
        aliases = [city, f"{city} ({cap(country)})", f"the city of {city}", cap(country)]
        wrongs = [other_city, f"{other_city}, {cap(other_country)}", cap(other_country)]
        details = [f"{city}, the capital of {country}.", f"{city}, which is in {country}.",
                   f"{city}. It has been the capital of {country} for a long time.",
                   f"The capital of {country} is {city}, its largest political centre."]
    elif kind < 0.8:
        river, other = rng.sample(RIVERS, 2)
        text = rng.choice([f"The {river}", f"The {river} River", f"The {river} river",
                           f"It is the {river} River."])
        aliases = [river, f"{river} River", f"the {river}"]
        wrongs = [f"The {other}", f"The {other} River", other]
        details = [f"The {river} River, one of the longest rivers in the region.",
                   f"The {river}, which flows into the sea after a long course.",
                   f"The {river} River. It is an important route for trade."]
    else:
        m, other = rng.sample(MOUNTAINS, 2)
        pre = "" if m in ("Mont Blanc",) else "Mount "
        pre2 = "" if other in ("Mont Blanc",) else "Mount "
        text = f"{pre}{m}"
        aliases = [m, f"Mt. {m}", f"{pre}{m}".lower()]
        wrongs = [f"{pre2}{other}", other]
        details = [f"{pre}{m}, a famous mountain.", f"{pre}{m}, which attracts many climbers every year.",
                   f"It is {pre}{m}; it is the highest point in its range."]
    return ShortAnswer(text, aliases, wrongs, details)


def rand_quantity(rng: random.Random) -> tuple[str, float]:
    r = rng.random()
    if r < 0.35:
        v = rng.randint(2, 100)  # from 2: the units are plural
        return str(v), v
    if r < 0.65:
        v = rng.randint(100, 50000)
        return f"{v:,}", v
    if r < 0.85:
        v = round(rng.uniform(1.1, 99.9), rng.choice([1, 2]))
        return f"{v:g}", v
    v = rng.randint(2, 20)
    return NUMBER_WORDS[v], v


def short_number(rng: random.Random) -> ShortAnswer:
    unit = rng.choice(UNITS)
    s, v = rand_quantity(rng)
    pre = rng.choice(["", "", "", "About ", "Approximately ", "Around ", "Roughly "])
    text = f"{pre}{s} {unit}"
    ab = UNIT_ABBREV.get(unit)
    num_s = s if not s.isalpha() else str(int(v))
    aliases = [num_s, f"{num_s} {ab}" if ab else f"about {s} {unit}", f"{s} {unit}",
               f"around {num_s} {unit}", f"{num_s}{ab}" if ab in ("%", "km", "kg") else f"{s}"]
    if isinstance(v, float) and not float(v).is_integer():
        w1, w2 = f"{v * 2:g}", f"{v / 2:g}"
    else:
        iv = int(v)
        w1, w2 = f"{iv * 2:,}", f"{iv + max(1, iv // 10) + 1:,}"
    wrongs = [f"{w1} {unit}", f"{w2} {unit}", w1, f"{num_s} {rng.choice([u for u in UNITS if u != unit])}"]
    year = rng.randint(1990, 2023)
    details = [f"{text}, according to recent estimates.", f"{text}, as of {year}.",
               f"{text} on average.", f"{text}, although it varies from year to year.",
               f"{text}, measured in {year}."]
    return ShortAnswer(text, aliases, wrongs, details)


def ordinal(n: int) -> str:
    if 10 <= n % 100 <= 20:
        return f"{n}th"
    return str(n) + {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")


def short_date(rng: random.Random) -> ShortAnswer:
    y = rng.randint(1000, 2023)
    m = rng.choice(MONTHS)
    d = rng.randint(1, 28)
    form = rng.random()
    if form < 0.4:
        text = str(y)
    elif form < 0.6:
        text = f"{m} {d}, {y}"
    elif form < 0.75:
        text = f"{d} {m} {y}"
    elif form < 0.88:
        text = f"In {y}"
    else:
        c = y // 100 + 1
        text = f"The {ordinal(c)} century"
    dy = rng.choice([-1, 1]) * rng.randint(1, 30)
    aliases = [str(y), f"around {y}", f"{m} {y}", f"the {y // 10 * 10}s", f"in {y}"]
    wrongs = [str(y + dy), f"{m} {d}, {y + dy}", f"In {y - dy}", f"the {ordinal(y // 100 + 2)} century"]
    details = [f"{text}, according to historical records.", f"{text}, shortly after the war.",
               f"{text}, when the new law came into force.", f"It happened in {y}, in {m}.",
               f"{text}. The date is well documented."]
    return ShortAnswer(text, aliases, wrongs, details)


def short_term(rng: random.Random) -> ShortAnswer:
    if rng.random() < 0.5:
        mods, heads, cat = rng.choice(TERM_GROUPS)
        mod, head = rng.choice(mods), rng.choice(heads)
        core = f"{mod} {head}"
        art = "An" if core[0] in "aeiou" else "A"
        text = rng.choice([cap(core), f"{art} {core}", cap(core)])
        aliases = [head, core, f"{art.lower()} {core}", cap(head)]
        wrongs = [f"{rng.choice([x for x in mods if x != mod])} {head}",
                  f"{mod} {rng.choice([x for x in heads if x != head])}"]
        details = [f"{cap(core)}, a kind of {cat}.", f"{cap(core)}, which is a common {cat}.",
                   f"It is called {core}; it is a {cat}.", f"{cap(core)} ({cat})"]
    else:
        term, other = rng.sample(TERMS, 2)
        text = cap(term)
        aliases = [term, f"{cap(term)}.", f"It's {term}."]
        if term.startswith("the "):
            aliases.append(term[4:])
        wrongs = [cap(other), other]
        details = [f"{cap(term)}, as described in most textbooks.",
                   f"{cap(term)}. It is a basic concept in this field.",
                   f"The answer is {term}, which is studied in introductory courses."]
    return ShortAnswer(text, aliases, wrongs, details)


def short_yesno(rng: random.Random) -> ShortAnswer:
    yes = rng.random() < 0.55
    word, other = ("Yes", "No") if yes else ("No", "Yes")
    ti = rng.randrange(len(TOPICS))
    t = TOPICS[ti]
    clause_f = {"kind": "effect", "topic": ti, "r": 0, "neg": not yes,
                "subj": rng.choice(t["subjects"]), "verb": rng.choice(t["verbs"])[0],
                "obj": rng.choice(t["objects"]), "cond": ""}
    clause = render_frame(clause_f).replace(" .", ".").rstrip(".")
    clause = clause[:1].lower() + clause[1:]
    form = rng.random()
    if form < 0.35:
        text = word
    elif form < 0.45:
        text = rng.choice(["True", "Correct"]) if yes else rng.choice(["False", "Incorrect"])
    else:
        text = f"{word}, {clause}."
    if n_words(text) > 10:
        text = word
    aliases = [word, f"{word}.", word.lower(), "Correct." if yes else "Not true.",
               "That's right." if yes else "That's not right."]
    wrongs = [other, f"{other}.", f"{other}, that is not the case." if yes else f"{other}, that is correct."]
    details = [f"{word}, {clause} {rng.choice(t['conds'])}.", f"{word}. In most cases, {clause}.",
               f"{word}, {clause}, as several studies show.", f"{word}, definitely."]
    return ShortAnswer(text, aliases, wrongs, details)


def short_sentence(rng: random.Random) -> ShortAnswer:
    r = rng.random()
    if r < 0.4:
        city, country = rng.choice(CAPITALS)
        oc = rng.choice([c for c in CAPITALS if c[0] != city])[0]
        text = f"The capital of {country} is {city}."
        aliases = [city, f"It's {city}.", f"{city} is the capital."]
        wrongs = [f"The capital of {country} is {oc}.", oc]
        details = [f"The capital of {country} is {city}, which is also its largest city.",
                   f"{city} has been the capital of {country} for many years."]
    elif r < 0.7:
        name, prof = person_name(rng)
        y = rng.randint(1600, 2000)
        verb = rng.choice(["described", "discovered", "proposed", "built", "designed"])
        text = f"It was first {verb} by {name} in {y}."
        aliases = [name, f"{name}, in {y}.", f"By {name}."]
        wrongs = [f"It was first {verb} by {person_name(rng)[0]} in {y}.",
                  f"It was first {verb} by {name} in {y + rng.randint(5, 80)}."]
        details = [f"It was first {verb} by {name}, a {prof}, in {y}.",
                   f"{name} first {verb} it in {y}, after many years of work."]
    else:
        unit = rng.choice(["minutes", "hours", "days", "weeks"])
        n = rng.randint(2, 60)
        text = f"It takes about {n} {unit}."
        aliases = [f"{n} {unit}", f"About {n} {unit}.", f"Roughly {n} {unit}."]
        wrongs = [f"It takes about {n * 3} {unit}.", f"{n + rng.randint(2, 20)} {unit}"]
        details = [f"It takes about {n} {unit}, depending on the conditions.",
                   f"About {n} {unit}, but it can take longer the first time."]
    return ShortAnswer(text, aliases, wrongs, details)


SHORT_KINDS = [(short_person, 3), (short_place, 2), (short_number, 3), (short_date, 2),
               (short_term, 3), (short_yesno, 2), (short_sentence, 2)]


def make_short(rng: random.Random) -> ShortAnswer:
    fns = [f for f, w in SHORT_KINDS for _ in range(w)]
    return rng.choice(fns)(rng)


def make_reference(rng: random.Random):
    r = rng.random()
    if r < 0.50:
        return make_short(rng)
    if r < 0.85:
        return make_long(rng, 20, 80)
    return make_long(rng, 120, 200)


# ---------------------------------------------------------------------------
# Output variations.
# ---------------------------------------------------------------------------
SHORT_VARIANTS = [("exact", 5), ("surface", 8), ("wrap", 12), ("alias", 10), ("wrong", 14),
                  ("hedge", 9), ("detail", 9), ("verbose", 4), ("refusal", 2), ("wrap_alias", 6)]
LONG_VARIANTS = [("exact", 4), ("surface", 5), ("paraphrase", 16), ("reorder", 7),
                 ("partial", 13), ("wrong", 15), ("detail", 10), ("hedge", 9),
                 ("format", 5), ("opener", 5), ("refusal", 2), ("partial_wrong", 5),
                 ("summary", 4)]


def weighted(rng: random.Random, table: list[tuple[str, int]]) -> str:
    total = sum(w for _, w in table)
    x = rng.randrange(total)
    for name, w in table:
        if x < w:
            return name
        x -= w
    raise AssertionError


def surface(text: str, rng: random.Random) -> str:
    ops = [lambda s: s.lower(), lambda s: s.rstrip(".") if s.endswith(".") else s + ".",
           lambda s: s.upper() if n_words(s) <= 3 else s.replace(". ", ".  "),
           lambda s: s.strip() + " ", lambda s: " " + s,
           lambda s: cap(s[4:]) if s.startswith("The ") else s.lower(),
           lambda s: s.replace(",", "") if "," in s else (s[:-1] if s.endswith(".") else s) + "!"]
    return rng.choice(ops)(text)


def short_output(ans: ShortAnswer, kind: str, rng: random.Random) -> str:
    x = ans.text.rstrip(".")
    pick = lambda lst, default: rng.choice(lst) if lst else default  # noqa: E731
    wrappers = SENTENCE_WRAPPERS if ans.sentence else WRAPPERS
    np_aliases = [a for a in ans.aliases if not a.endswith(".")]  # noun phrases only
    if kind == "exact":
        return ans.text
    if kind == "surface":
        return surface(ans.text, rng)
    if kind == "wrap":
        w = rng.choice(wrappers)
        return w.format(x=decap(x) if not w.startswith("{x}") else x)
    if kind == "alias":
        return pick(ans.aliases, x.lower())
    if kind == "wrap_alias":
        w = rng.choice(WRAPPERS)
        a = pick(np_aliases, x)
        return w.format(x=decap(a) if not w.startswith("{x}") else a)
    if kind == "wrong":
        w = pick(ans.wrongs, "I don't know")
        if rng.random() < 0.6:
            return w
        wr = rng.choice(wrappers)
        return wr.format(x=decap(w.rstrip(".")) if not wr.startswith("{x}") else w.rstrip("."))
    if kind == "hedge":
        w = pick(ans.wrongs, "something else").rstrip(".")
        if ans.sentence:
            h = rng.choice(SENTENCE_HEDGES)
            y = x if rng.random() < 0.7 else w
            return h.format(x=cap(y) if h.startswith("{x}") else decap(y))
        y = x if rng.random() < 0.6 else pick(np_aliases, x)
        h = rng.choice(SHORT_HEDGES)
        return h.format(x=decap(y) if not h.startswith("{x}") else y, w=decap(w))
    if kind == "detail":
        return pick(ans.details, x + ".")
    if kind == "verbose":
        ti = rng.randrange(len(TOPICS))
        extra = render_frame(new_frame(rng, ti)) if rng.random() < 0.5 else ""
        if ans.sentence:
            s = f"Based on {rng.choice(SOURCES)}, {decap(x)}."
        else:
            s = f"Based on {rng.choice(SOURCES)}, the answer is {decap(x)}."
        return (s + " " + extra).strip()
    if kind == "refusal":
        return rng.choice(REFUSALS)
    raise ValueError(kind)


def hedge_text(text: str, rng: random.Random) -> str:
    if rng.random() < 0.6:
        return rng.choice(HEDGE_PREFIXES) + decap(text)
    return text + " " + rng.choice(HEDGE_SUFFIXES)


def long_output(ans: LongAnswer, kind: str, rng: random.Random) -> str:
    frames = ans.frames
    n = len(frames)

    def paraphrased(fs: list[dict], p: float = 0.5) -> str:
        out = []
        for f in fs:
            g = dict(f)
            k = FRAME_REALIZATIONS[f["kind"]]
            if k > 1 and rng.random() < 0.8:
                g["r"] = rng.choice([i for i in range(k) if i != f["r"]])
            out.append(g)
        return swap_synonyms(render(out), rng, p)

    if kind == "exact":
        return ans.text
    if kind == "surface":
        return surface(ans.text, rng)
    if kind == "paraphrase":
        return paraphrased(frames, rng.choice([0.3, 0.5, 0.8]))
    if kind == "reorder":
        if n < 2:
            return paraphrased(frames)
        order = list(range(n))
        while order == list(range(n)):
            rng.shuffle(order)
        fs = [frames[i] for i in order]
        return render(fs) if rng.random() < 0.5 else paraphrased(fs, 0.3)
    if kind in ("partial", "summary"):
        if n < 2:
            f = dict(frames[0])
            # half a sentence: subject + verb + object only
            if f["kind"] == "effect":
                t = TOPICS[f["topic"]]
                return f"{cap(f['subj'])} {verb_phrase(f['verb'], t['tense'], f['neg'])} {f['obj']}."
            return paraphrased(frames, 0.8)
        if kind == "summary":
            return "In short, " + decap(render_frame(frames[rng.randrange(n)]))
        k = rng.randint(1, n - 1)
        keep = sorted(rng.sample(range(n), k))
        fs = [frames[i] for i in keep]
        return render(fs) if rng.random() < 0.6 else paraphrased(fs, 0.4)
    if kind in ("wrong", "partial_wrong"):
        fs = list(frames)
        if kind == "partial_wrong" and n > 2:
            fs = fs[: rng.randint(1, n - 1)]
        m = len(fs)
        for i in rng.sample(range(m), min(m, rng.choice([1, 1, 2, 3]))):
            fs[i] = corrupt_frame(fs[i], rng)
        return render(fs) if rng.random() < 0.6 else paraphrased(fs, 0.3)
    if kind == "detail":
        extra = [new_frame(rng, ans.topic) for _ in range(rng.choice([1, 1, 2]))]
        base = list(frames)
        budget = MAX_WORDS - sum(n_words(render_frame(f)) for f in extra)
        while base and n_words(render(base)) > budget:
            base.pop()
        if not base:
            base = frames[:1]
            extra = extra[:1]
        pos = rng.choice(["end", "end", "middle"])
        if pos == "middle" and len(base) > 1:
            i = rng.randint(1, len(base) - 1)
            fs = base[:i] + extra + base[i:]
        else:
            fs = base + extra
        return render(fs)
    if kind == "hedge":
        body = ans.text if rng.random() < 0.5 else paraphrased(frames, 0.3)
        return hedge_text(body, rng)
    if kind == "format":
        sents = [render_frame(f) for f in frames]
        style = rng.random()
        if style < 0.4 and n > 1:
            return "\n".join(f"- {s}" for s in sents)
        if style < 0.7 and n > 1:
            return "\n".join(f"{i + 1}. {s}" for i, s in enumerate(sents))
        return ans.text.lower()
    if kind == "opener":
        opener = rng.choice(OPENERS)
        body = ans.text if rng.random() < 0.5 else paraphrased(frames, 0.3)
        return opener + (body if opener.rstrip()[-1] in ".!:" else decap(body))
    if kind == "refusal":
        return rng.choice(REFUSALS)
    raise ValueError(kind)


def make_output(ans, kind_table_rng: random.Random, exclude_exact: bool = False) -> tuple[str, str]:
    rng = kind_table_rng
    if isinstance(ans, ShortAnswer):
        table = SHORT_VARIANTS
        kind = weighted(rng, table)
        if exclude_exact and kind == "exact":
            kind = "surface"
        return kind, short_output(ans, kind, rng)
    table = LONG_VARIANTS
    kind = weighted(rng, table)
    if exclude_exact and kind == "exact":
        kind = rng.choice(["surface", "paraphrase"])
    return kind, long_output(ans, kind, rng)


def ok_text(s: str) -> bool:
    return bool(s.strip()) and n_words(s) <= MAX_WORDS and est_pieces(s) <= EST_PIECES_LIMIT


# ---------------------------------------------------------------------------
# The two sets.
# ---------------------------------------------------------------------------
def build_nightly(rows: int, seed: int):
    rng = random.Random(seed)
    n_refs = max(1, math.ceil(rows / OUTPUTS_PER_REFERENCE))
    refs: list = []
    seen_refs: dict[str, None] = {}
    while len(refs) < n_refs:
        a = make_reference(rng)
        if a.text in seen_refs or not ok_text(a.text):
            continue
        seen_refs[a.text] = None
        refs.append(a)
    out_rows = []
    kinds = Counter()
    for qi, a in enumerate(refs):
        outs: dict[str, None] = {}
        tries = 0
        want = min(OUTPUTS_PER_REFERENCE, rows - len(out_rows))
        while len(outs) < want:
            tries += 1
            kind, o = make_output(a, rng, exclude_exact=bool(outs) and tries < 500)
            if len(outs) == 0:  # every reference gets one exact copy
                kind, o = "exact", a.text
            if tries > 2000:  # cannot happen with these lists; keeps the loop finite
                o = f"{rng.choice(OPENERS)}{decap(a.text)} ({len(outs)})"
            if o in outs or not ok_text(o):
                continue
            outs[o] = None
            kinds[kind] += 1
            out_rows.append((f"q{qi:05d}-o{len(outs) - 1:02d}", a.text, o))
    rng.shuffle(out_rows)
    return out_rows, kinds


def build_distinct(rows: int, seed: int):
    rng = random.Random(seed + 1)
    seen: dict[str, None] = {}
    out_rows = []
    kinds = Counter()
    i = 0
    while len(out_rows) < rows:
        a = make_reference(rng)
        if a.text in seen or not ok_text(a.text):
            continue
        o = None
        for _ in range(60):
            kind, cand = make_output(a, rng, exclude_exact=True)
            if cand != a.text and cand not in seen and ok_text(cand):
                o = cand
                break
        if o is None:
            continue
        seen[a.text] = None
        seen[o] = None
        kinds[kind] += 1
        out_rows.append((f"d{i:06d}", a.text, o))
        i += 1
    return out_rows, kinds


def load_tokenizer():
    path = os.path.join(os.environ.get("REFSCORE_MODEL_DIR", os.path.join(REPO, "models", "all-MiniLM-L6-v2")),
                        "tokenizer.json")
    try:
        from tokenizers import Tokenizer
    except ImportError:
        return None, "tokenizers not installed"
    if not os.path.isfile(path):
        return None, f"no {path}"
    tk = Tokenizer.from_file(path)
    tk.no_truncation()
    tk.no_padding()
    return tk, path


def describe(name: str, rows, kinds: Counter, tk) -> None:
    refs = [r[1] for r in rows]
    outs = [r[2] for r in rows]
    distinct = dict.fromkeys(refs + outs)
    wc = [n_words(t) for t in distinct]
    buckets = Counter()
    for w in wc:
        buckets["1-10" if w <= 10 else "11-19" if w < 20 else "20-80" if w <= 80
                else "81-119" if w < 120 else "120-200" if w <= 200 else ">200"] += 1
    ref_wc = [n_words(t) for t in dict.fromkeys(refs)]
    rb = Counter("1-10" if w <= 10 else "11-19" if w < 20 else "20-80" if w <= 80
                 else "81-119" if w < 120 else "120-200" for w in ref_wc)
    msg = (f"{name}: {len(rows)} rows, {len(dict.fromkeys(refs))} distinct references, "
           f"{len(distinct)} distinct texts; max words {max(wc)}; "
           f"reference words {dict(sorted(rb.items()))}; all texts {dict(sorted(buckets.items()))}; "
           f"output kinds {dict(sorted(kinds.items()))}")
    if tk is not None:
        lens = [len(e.ids) for e in tk.encode_batch(list(distinct))]
        msg += f"; word-pieces incl. [CLS]/[SEP]: max {max(lens)}, mean {sum(lens) / len(lens):.1f}"
        worst = max(range(len(lens)), key=lambda i: lens[i])
        if lens[worst] > MAX_PIECES:
            raise SystemExit(f"make_bench_sets: a text has {lens[worst]} word-pieces "
                             f"(> {MAX_PIECES}): {list(distinct)[worst][:80]!r}")
    print(msg, file=sys.stderr)


def write(path: str, rows) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq
    table = pa.table({
        "id": pa.array([r[0] for r in rows], pa.string()),
        "reference": pa.array([r[1] for r in rows], pa.string()),
        "output": pa.array([r[2] for r in rows], pa.string()),
    })
    tmp = path + ".tmp"
    pq.write_table(table, tmp, compression="zstd", row_group_size=65536)
    os.replace(tmp, path)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("outdir", help="folder to write nightly.parquet and distinct.parquet into")
    ap.add_argument("--rows", type=int, default=DEFAULT_ROWS,
                    help=f"rows per file (default {DEFAULT_ROWS}); nightly keeps "
                         f"{OUTPUTS_PER_REFERENCE} outputs per reference")
    ap.add_argument("--seed", type=int, default=DEFAULT_SEED, help=f"default {DEFAULT_SEED}")
    args = ap.parse_args()
    if args.rows < 1:
        ap.error("--rows must be at least 1")
    os.makedirs(args.outdir, exist_ok=True)
    tk, why = load_tokenizer()
    if tk is None:
        print(f"make_bench_sets: word-piece check skipped ({why})", file=sys.stderr)

    nightly, nk = build_nightly(args.rows, args.seed)
    describe("nightly", nightly, nk, tk)
    distinct, dk = build_distinct(args.rows, args.seed)
    texts = [r[1] for r in distinct] + [r[2] for r in distinct]
    assert len(set(texts)) == len(texts), "distinct set has a repeated text"
    describe("distinct", distinct, dk, tk)

    for name, rows in (("nightly", nightly), ("distinct", distinct)):
        path = os.path.join(args.outdir, f"{name}.parquet")
        write(path, rows)
        print(f"make_bench_sets: wrote {path} ({len(rows)} rows)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
