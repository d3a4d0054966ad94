"""Write examples/qa.parquet: a small, hand-written QA evaluation set for refscore.

Every row is a (question, reference, output) triple plus a hand label saying
whether the output gives the same core answer as the reference under the
Meaning Match rules of docs/metrics.md#meaning-match (aliases and number words count, hedged
answers and right-beside-wrong alternatives do not, extra detail is fine unless
it contradicts). All text is written out below as Python literals, grouped by
the kind of case it exercises; nothing is random, so the file is the same on
every run (for a given pyarrow version).

Columns, in order:
    id                      string, "qa-0001", ...
    question                string
    reference               string, nullable (ground-truth answer)
    output                  string, nullable (the model's answer)
    category                string (exact, paraphrase, number_words, wrong, hedged,
                            multi_fact, long, unicode, contains, nulls, repeated)
    expected_meaning_match  bool, nullable (null where reference or output is null,
                            or where the reference is empty / whitespace only)
    judge                   bool (the ~60 rows an LLM judge should be asked about)

Rerun from the repository root with:

    python3 examples/make_example.py

Needs only pyarrow (`pip install pyarrow`).
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

OUT_PATH = Path(__file__).resolve().parent / "qa.parquet"
ROW_GROUP_SIZE = 100  # several row groups, so readers see more than one batch

# Row literals: (question, reference, output, expected_meaning_match[, J]).
# A trailing J marks the row for the LLM judge (judge = true).
J = "judge"
T, F = True, False


# --- exact: identical, or differing only in case/whitespace/punctuation/articles
EXACT = [
    ("What is the capital of France?", "Paris", "Paris", T, J),
    ("Which landmark in Paris was completed in 1889 for the World's Fair?",
     "The Eiffel Tower", "eiffel tower.", T),
    ('Who wrote "Pride and Prejudice"?', "Jane Austen", "jane austen", T),
    ("What is the chemical symbol for gold?", "Au", "Au", T),
    ("What is the largest planet in the Solar System?", "Jupiter", "JUPITER", T),
    ("Which ocean is the largest?", "the Pacific Ocean", "Pacific Ocean", T, J),
    ("What gas do plants absorb from the air for photosynthesis?",
     "Carbon dioxide", "carbon dioxide.", T),
    ('Who painted "The Starry Night"?', "Vincent van Gogh", "Vincent van Gogh", T),
    ("What is the longest river in South America?", "The Amazon", "Amazon", T),
    ("In which country is Machu Picchu?", "Peru", "  Peru  ", T),
    ("What is the hardest natural mineral?", "Diamond", "diamond!", T),
    ("What is the smallest prime number?", "2", "2", T),
    ("Which element has atomic number 1?", "Hydrogen", "Hydrogen.", T),
    ("Who developed the theory of general relativity?",
     "Albert Einstein", "Albert   Einstein", T),
    ("What is the currency of Japan?", "The yen", "yen", T),
    ("Which planet is known as the Red Planet?", "Mars", "Mars\n", T),
    ("What is the capital of Australia?", "Canberra", "Canberra.", T),
    ("Who was the first person to walk on the Moon?",
     "Neil Armstrong", "neil armstrong", T),
    ("What is the main language spoken in Brazil?", "Portuguese", "Portuguese", T),
    ("Which organ pumps blood through the human body?", "The heart", "A heart.", T, J),
    ("What is H2O commonly called?", "Water", "water", T),
    ("Which company makes the iPhone?", "Apple", "apple", T),
    ("What is the name of the galaxy that contains our Solar System?",
     "The Milky Way", "the milky way", T),
    ("Which instrument has 88 keys?", "The piano", "piano", T),
    ("What is the square root of 81?", "9", "9.", T),
    ('Who wrote the novel "1984"?', "George Orwell", "George Orwell", T),
    ("What is the capital of Canada?", "Ottawa", "OTTAWA", T),
    ("What is the tallest mountain above sea level?",
     "Mount Everest", "Mount Everest.", T),
    ("Which blood type is known as the universal donor?",
     "O negative", "o negative", T),
    ("What does DNA stand for?", "Deoxyribonucleic acid", "deoxyribonucleic acid", T),
    ("Who is the author of the Sherlock Holmes stories?",
     "Arthur Conan Doyle", "\tArthur Conan Doyle ", T),
    ("What is the largest country in South America?", "Brazil", '"Brazil"', T),
]

# --- paraphrase: same answer in other words (plus a few look-alike traps)
PARAPHRASE = [
    ("Which city is nicknamed the Big Apple?", "New York City", "NYC", T, J),
    ("Who painted the Mona Lisa?", "Leonardo da Vinci", "Da Vinci", T, J),
    ("What is the largest country by area?", "Russia", "the Russian Federation", T),
    ("Who was the 16th president of the United States?", "Abraham Lincoln", "Lincoln", T),
    ("What is the capital of the United Kingdom?", "London", "London, England", T),
    ("What is the common name for sodium chloride?", "Table salt", "salt", T),
    ("Who proposed the theory of evolution by natural selection?",
     "Charles Darwin", "Darwin", T),
    ("What is the largest organ of the human body?", "The skin", "Your skin", T),
    ("Which vitamin does the skin make when exposed to sunlight?",
     "Vitamin D", "Cholecalciferol (vitamin D3)", T, J),
    ("What is the capital of the Netherlands?",
     "Amsterdam", "Amsterdam (although the government sits in The Hague)", T),
    ("What is the boiling point of water at sea level?",
     "100 degrees Celsius", "100 °C", T),
    ("At what temperature does water boil at sea level, in everyday US units?",
     "212 degrees Fahrenheit", "212 °F", T),
    ("Who is the author of the Harry Potter books?", "J. K. Rowling", "Joanne Rowling", T),
    ("Which country is known as the Land of the Rising Sun?", "Japan", "Nippon", T),
    ("What is the largest hot desert in the world?", "The Sahara", "Sahara Desert", T),
    ("Who founded Microsoft together with Paul Allen?",
     "Bill Gates", "William H. Gates III", T),
    ("In which US state is the Golden Gate Bridge?", "California", "CA", T),
    ("What is the main job of red blood cells?",
     "To carry oxygen around the body",
     "They transport oxygen from the lungs to the tissues.", T, J),
    ("What is the speed of light in a vacuum?",
     "About 300,000 km per second", "roughly 3 × 10^8 m/s", T),
    ("What does CPU stand for?", "Central processing unit", "central processor", T),
    ("Which war ended in 1945?", "World War II", "the Second World War", T),
    ('Who wrote "War and Peace"?', "Leo Tolstoy", "Lev Nikolayevich Tolstoy", T),
    ("Which scientist is famous for the three laws of motion?",
     "Isaac Newton", "Sir Isaac Newton", T),
    ("What kind of animal is a killer whale?",
     "A dolphin", "The orca is the largest member of the oceanic dolphin family.", T),
    ('What is the opposite of "ascend"?', "Descend", "go down", T),
    ("What is the main ingredient of guacamole?", "Avocado", "avocados", T),
    ("Who is often called the father of the computer?", "Charles Babbage", "Babbage", T),
    ("What is the chemical name for baking soda?",
     "Sodium bicarbonate", "sodium hydrogen carbonate", T, J),
    ("Which language has the most native speakers?", "Mandarin Chinese", "Mandarin", T),
    ("What is the capital of the United States?",
     "Washington, D.C.", "the District of Columbia", T),
    ("What do we call animals that eat only plants?", "Herbivores", "plant-eaters", T),
    ("Which month has the fewest days?", "February", "Feb", T),
    ("Who was the first woman to win a Nobel Prize?",
     "Marie Curie", "Maria Skłodowska-Curie", T),
    ("Which planet has the most prominent ring system?",
     "Saturn", "the sixth planet from the Sun", T),
    ("Which US state has the largest area?", "Alaska", "AK", T),
    # look-alike traps: similar surface form, different entity
    ("Which gas makes up most of the Earth's atmosphere?", "Nitrogen", "N2O", F, J),
    ('Who wrote the novel "Frankenstein"?', "Mary Shelley", "Percy Shelley", F, J),
    ("What is the largest moon of Saturn?", "Titan", "Titania", F),
]

# --- number_words: digits against English number words
NUMBER_WORDS = [
    ("How many days are in a leap year?", "366", "three hundred sixty-six", T),
    ("How many legs does a spider have?", "eight", "8", T),
    ("How many players does a soccer team have on the field?", "11", "eleven", T),
    ("How many centimetres are in a metre?", "one hundred", "100", T),
    ("How many squares are on a chessboard?", "64", "sixty-four", T),
    ("What is 12 squared?", "144", "a hundred and forty-four", T, J),
    ("How many years are in a century?", "100", "a hundred", T),
    ("How many keys does a standard piano have?", "eighty-eight", "88", T),
    ("How many minutes are in a day?", "1440", "one thousand four hundred forty", T, J),
    ("How many metres are in a kilometre?", "1000", "one thousand", T),
    ("How many bones are in the adult human body?", "206", "two hundred and six", T),
    ("What is the value of pi to two decimal places?", "3.14", "three point one four", T, J),
    ("How many seconds are in an hour?", "3600", "three thousand six hundred", T),
    ("A train travels at 80 km/h for 40 hours. How many kilometres does it cover?",
     "3200", "three thousand two hundred", T),
    ("How many states are in the United States?", "fifty", "50", T),
    ("How many hours are in a week?", "168", "one hundred sixty-eight", T),
    ("How many sides does a hexagon have?", "6", "Six.", T),
    ("How many strings does a standard guitar have?", "six", "6", T),
    ("How many continents are there in the seven-continent model?", "7", "seven", T),
    ("How many cards are in a standard deck without jokers?", "52", "fifty two", T),
    ("What is 15 + 5?", "20", "twenty", T),
    ("How many teeth does an adult human usually have?", "32", "thirty-two", T),
    ("In what year did World War II end?", "1945", "nineteen forty-five", T, J),
    ("How many zeros are in one million?", "6", "six", T),
    ("How many weeks are in a year?", "52", "fifty-two", T),
    ("What is 1000 minus 1?", "999", "nine hundred ninety-nine", T),
    ("How many millilitres are in a litre?", "one thousand", "1,000", T),
    ("How many degrees are in a right angle?", "ninety", "90°", T),
    ("How many eggs are in a dozen?", "12", "twelve", T),
    # wrong numbers written the other way
    ("How many legs does an insect have?", "six", "8", F, J),
    ("How many planets are in the Solar System?", "eight", "nine", F),
    ("What is 7 times 8?", "56", "fifty-four", F, J),
    ("How many days are in a common (non-leap) year?", "365", "three hundred fifty-six", F),
]

# --- wrong: plainly wrong answers (wrong entity, wrong number, contradiction)
WRONG = [
    ("What is the capital city of Australia?", "Canberra", "Sydney", F, J),
    ('Who wrote "Romeo and Juliet"?', "William Shakespeare", "Christopher Marlowe", F),
    ("What is the chemical symbol for sodium?", "Na", "So", F),
    ("What is the boiling point of water in Fahrenheit at sea level?", "212", "200", F),
    ("Which planet is closest to the Sun?", "Mercury", "Venus", F),
    ("In which year did the Berlin Wall fall?", "1989", "1991", F, J),
    ('Who painted "Guernica"?', "Pablo Picasso", "Salvador Dalí", F),
    ("What is the largest mammal?", "The blue whale", "The African elephant", F),
    ("What is the capital of Turkey?", "Ankara", "Istanbul", F, J),
    ("What is the square root of 144?", "12", "14", F),
    ("Who discovered penicillin?", "Alexander Fleming", "Louis Pasteur", F),
    ("Which element has the symbol Fe?", "Iron", "Fluorine", F),
    ("What language is mainly spoken in Argentina?", "Spanish", "Portuguese", F),
    ("How many chromosomes do humans normally have?", "46", "48", F),
    ("What is the smallest country in the world by area?", "Vatican City", "Monaco", F),
    ("Who was the first President of the United States?",
     "George Washington", "Thomas Jefferson", F),
    ("Which gas is the Sun mostly made of?", "Hydrogen", "Helium", F),
    ("Which metal is liquid at room temperature?", "Mercury", "Lead", F),
    ("What is the longest bone in the human body?", "The femur", "The tibia", F),
    ("How long does sunlight take to reach the Earth?",
     "About 8 minutes", "About 8 seconds", F, J),
    ("Which country gave the Statue of Liberty to the United States?",
     "France", "The United Kingdom", F),
    ("In what year did humans first land on the Moon?", "1969", "1972", F),
    ("What is the speed of sound in air at 20 °C?", "About 343 m/s", "About 143 m/s", F),
    ("What is the capital of Brazil?", "Brasília", "Rio de Janeiro", F),
    ("Which blood cells fight infection?", "White blood cells", "Red blood cells", F),
    ("Which organelle is called the powerhouse of the cell?",
     "The mitochondrion", "The ribosome", F),
    ("Who created the detective Hercule Poirot?", "Agatha Christie", "Arthur Conan Doyle", F),
    ("Who invented the World Wide Web?", "Tim Berners-Lee", "Vint Cerf", F),
    ("What is the atomic number of carbon?", "6", "12", F),
    ("What is the default port for HTTPS?", "443", "8080", F),
    ("What does the HTTP status code 404 mean?", "Not Found", "Internal Server Error", F),
    ("What is the longest river in Africa?", "The Nile", "The Congo", F),
    ("Is the Great Wall of China visible from the Moon with the naked eye?",
     "No, it is not visible from the Moon with the naked eye.",
     "Yes, it is visible from the Moon with the naked eye.", F, J),
]

# --- hedged: uncertain answers, or the right answer beside wrong alternatives
HEDGED = [
    ("What is the capital of France, as a one-word answer?",
     "Paris", "It might be Paris, but I'm not sure.", F, J),
    ("In which city is the Louvre museum?", "Paris", "Either Paris or Lyon.", F, J),
    ('Who is traditionally credited with writing "The Odyssey"?',
     "Homer", "Probably Homer, though I can't say for certain.", F),
    ("What is the capital of Switzerland?",
     "Bern", "Bern or Zurich, I can't remember which.", F, J),
    ("How many moons does Mars have?", "2", "I think two, maybe three.", F),
    ("Who formulated the law of universal gravitation?",
     "Isaac Newton", "Possibly Newton, or maybe Galileo.", F),
    ("What is the largest lake in Africa?",
     "Lake Victoria", "It could be Lake Victoria or Lake Tanganyika.", F),
    ("What is the chemical symbol for potassium?", "K", "Either K or P.", F),
    ("In what year did the Titanic sink?", "1912", "Around 1912 or 1915, I'm not certain.", F),
    ("What is the capital of New Zealand?",
     "Wellington", "I'm not sure. Auckland? Or Wellington?", F),
    ("What is the capital of Spain?", "Madrid", "Madrid, or possibly Barcelona.", F),
    ("How many hearts does an octopus have?", "Three", "I don't know.", F, J),
    ('Who painted "The Last Supper"?',
     "Leonardo da Vinci", "It's either Leonardo da Vinci or Michelangelo.", F),
    ("What is the freezing point of water in Fahrenheit?", "32", "Maybe 32?", F),
    ("Which planet has the Great Red Spot?",
     "Jupiter", "Jupiter, Saturn or Neptune.", F),
    ("What is the capital of Morocco?",
     "Rabat", "One of Rabat, Casablanca or Marrakesh.", F),
    ("In what year did the French Revolution begin?",
     "1789", "Sometime in the late 1700s, perhaps 1789.", F, J),
    ("What is the tallest building in the world as of 2024?",
     "The Burj Khalifa", "I'm not certain, but it may be the Burj Khalifa.", F),
    ("What is the largest internal organ of the human body?",
     "The liver", "The liver or the lungs.", F),
    ('Who composed "The Four Seasons"?',
     "Antonio Vivaldi", "I believe Vivaldi, though it could be Corelli.", F),
    ("Which of these is a noble gas: oxygen, argon or nitrogen?",
     "Argon", "Argon or nitrogen.", F),
    ("What is the capital of Vietnam?", "Hanoi", "Hanoi or Ho Chi Minh City.", F),
    ("How many sides does a heptagon have?", "7", "Seven, or possibly eight.", F),
    ("Who was the Greek god of the sea?",
     "Poseidon", "As far as I know it's Poseidon, but I could be wrong.", F, J),
    ("Who invented the telephone?",
     "Alexander Graham Bell",
     "Perhaps Alexander Graham Bell, but it may have been Elisha Gray.", F),
]

# --- multi_fact: answers made of several facts (includes the worked cases of docs/metrics.md#fact-ratio)
MULTI_FACT = [
    # the worked cases of docs/metrics.md#fact-ratio, verbatim
    ("Which fruits does Amy like?",
     "Amy likes apples and bananas", "Amy likes apples, berries and plums", F, J),
    ("What is the capital of France, and what language is spoken there?",
     "Paris is the capital; French is spoken", "Paris is the capital", F, J),
    ("How old was Queen Elizabeth II when she died?",
     "96 years old", "more than 95", F, J),
    # further cases
    ("What are the primary colours of light?", "Red, green and blue", "Blue, red and green", T),
    ("Which two elements make up water?", "Hydrogen and oxygen", "Oxygen and hydrogen", T),
    ("Name the three classical states of matter.", "Solid, liquid and gas", "Solid and liquid", F),
    ("Who were the first two people to walk on the Moon?",
     "Neil Armstrong and Buzz Aldrin", "Neil Armstrong and Michael Collins", F, J),
    ("What are the two official languages of Canada?", "English and French", "French and English", T),
    ("Name the noble gases in the first three periods of the periodic table.",
     "Helium, neon and argon", "helium, neon, argon", T),
    ("Which countries border Portugal?", "Spain", "Spain and France", F),
    ("Where and when was Albert Einstein born?",
     "Ulm, Germany, in 1879", "He was born in 1879 in Ulm.", T, J),
    ("Where and when was Marie Curie born?", "Warsaw, in 1867", "Warsaw, in 1876", F),
    ("What goes into a basic vinaigrette?",
     "Oil, vinegar, salt and pepper", "Oil and vinegar, seasoned with salt and pepper", T),
    ("Who were the four members of the Beatles from 1962 to 1970?",
     "John Lennon, Paul McCartney, George Harrison and Ringo Starr",
     "Lennon, McCartney, Harrison and Starr", T),
    ("What are the two largest planets in the Solar System?",
     "Jupiter and Saturn", "Jupiter and Saturn, followed by Uranus and Neptune", T),
    ('Who wrote the novel "Jurassic Park" and who directed the 1993 film?',
     "Michael Crichton wrote the novel; Steven Spielberg directed the film",
     "Spielberg directed it, based on Crichton's novel", T, J),
    ("What are the capital and the currency of Japan?",
     "Tokyo; the yen", "Tokyo, and the currency is the won", F, J),
    ("At what temperatures, in Celsius, does water freeze and boil at sea level?",
     "0 °C and 100 °C", "It freezes at 0 °C and boils at 100 °C", T),
    ("Which two countries share the longest international land border?",
     "Canada and the United States", "The United States and Mexico", F),
    ("What are the three branches of the US federal government?",
     "Legislative, executive and judicial",
     "The executive, the legislative and the judicial branches", T),
    ("What are the three main types of rock?",
     "Igneous, sedimentary and metamorphic", "Igneous and sedimentary", F),
    ("What does photosynthesis need as inputs?",
     "Carbon dioxide, water and light", "Sunlight, CO2 and water", T),
    ("Who won the 2018 FIFA World Cup, and who was runner-up?",
     "France won; Croatia was runner-up", "France beat Croatia in the final", T),
    ("Who won the 2014 FIFA World Cup, and who was runner-up?",
     "Germany won; Argentina was runner-up", "Germany won; Brazil was runner-up", F, J),
    ("What are the first and last books of the Protestant Bible?",
     "Genesis and Revelation", "Genesis and Revelations", T),
    ("How tall is Mount Everest and where is it?",
     "8,849 m, on the border between Nepal and China",
     "8,849 metres, in the Himalayas between Nepal and Tibet (China)", T),
    ('Who wrote "Nineteen Eighty-Four" and when was it published?',
     "George Orwell, 1949", "Orwell, published in 1948", F),
    ("Which vitamins are fat-soluble?", "A, D, E and K", "Vitamins A, D, E and K", T),
]

# --- long: multi-sentence explanations, JSON answers, step lists, doses
LONG = [
    ("Explain how vaccines train the immune system.",
     "A vaccine exposes the immune system to a harmless version or part of a pathogen, "
     "such as an inactivated virus, a weakened live virus, a protein subunit, or mRNA "
     "that tells cells to make one viral protein. Antigen-presenting cells show these "
     "antigens to T cells, and B cells start producing antibodies that bind to them. "
     "Most of these cells die off once the threat is gone, but long-lived memory B and "
     "T cells remain. If the real pathogen appears later, the memory cells recognise it "
     "quickly and mount a faster, stronger response, often stopping the infection "
     "before it causes serious illness. Some vaccines need booster doses because this "
     "memory fades over time.",
     "Vaccines give the body a safe preview of a germ. They contain either a killed or "
     "weakened form of the pathogen, a piece of it like a surface protein, or mRNA "
     "instructions for making such a protein. The immune system reacts as if it were a "
     "real infection: B cells make antibodies against the antigen and T cells are "
     "activated. After the response winds down, memory B and T cells stay in the body. "
     "When the actual germ shows up, these memory cells react much faster and more "
     "strongly, so the illness is prevented or kept mild. Because memory can weaken, "
     "boosters are sometimes recommended.",
     T, J),
    ("Why is the sky blue?",
     "Sunlight contains all visible wavelengths. As it passes through the atmosphere it "
     "is scattered by nitrogen and oxygen molecules, which are much smaller than the "
     "wavelength of light. This Rayleigh scattering is far stronger for short "
     "wavelengths (it scales with the inverse fourth power of the wavelength), so blue "
     "light is scattered across the sky much more than red light. When we look at any "
     "part of the sky away from the Sun we see this scattered blue light. Violet is "
     "scattered even more, but sunlight contains less violet and our eyes are less "
     "sensitive to it, so the sky looks blue rather than violet.",
     "The sky is blue mainly because it reflects the colour of the oceans, which cover "
     "about 71 percent of the Earth's surface. Sunlight bounces off the water and back "
     "up into the atmosphere, where the blue tint spreads out across the sky. This is "
     "also why the sky looks greyer over deserts and large land masses, and why it "
     "turns darker when there is heavy cloud cover blocking the reflected light from "
     "the sea.",
     F, J),
    ("What is the usual adult dose of paracetamol (acetaminophen) for pain, and the daily maximum?",
     "For a healthy adult the usual dose of paracetamol is 500 mg to 1 g by mouth every "
     "4 to 6 hours when needed. Do not take more than 4 g (4,000 mg) in any 24-hour "
     "period, and leave at least 4 hours between doses. People who weigh under 50 kg, "
     "drink alcohol heavily, or have liver disease should use a lower maximum, often "
     "around 2 to 3 g a day, on medical advice. Check other medicines such as cold and "
     "flu remedies, because many of them also contain paracetamol and it is easy to "
     "exceed the limit by accident. An overdose can cause serious liver damage even if "
     "the person feels well at first.",
     "Adults can usually take 500 mg to 1 g of paracetamol every 4 to 6 hours as "
     "needed, up to a maximum of 8 g in 24 hours. Leave at least 4 hours between doses. "
     "If you weigh less than 50 kg, drink a lot of alcohol or have liver problems, ask "
     "a doctor about a lower limit. Many cold and flu products also contain "
     "paracetamol, so check labels to avoid taking it twice. Overdose can damage the "
     "liver.",
     F, J),
    ("What is the usual over-the-counter adult dose of ibuprofen?",
     "For adults and children over 12, the usual over-the-counter dose of ibuprofen is "
     "200 to 400 mg taken by mouth every 4 to 6 hours as needed, with food or milk to "
     "reduce stomach upset. Without a doctor's advice, do not take more than 1,200 mg "
     "in 24 hours; under medical supervision the limit can be higher. Ibuprofen is not "
     "suitable for everyone: people with stomach ulcers, severe heart failure, kidney "
     "disease, or asthma that is worsened by anti-inflammatory drugs, and women in the "
     "third trimester of pregnancy, should avoid it unless a doctor says otherwise.",
     "Adults (and children over 12) usually take 200-400 mg every 4-6 hours, ideally "
     "with food or milk. The self-medication limit is 1,200 mg per day; a doctor may "
     "prescribe more. Avoid it if you have a stomach ulcer, serious heart or kidney "
     "problems, asthma triggered by NSAIDs, or are in late pregnancy, unless a doctor "
     "advises it.",
     T),
    ("What is the first-line treatment for anaphylaxis in an adult?",
     "Anaphylaxis is a medical emergency. The first-line treatment is adrenaline "
     "(epinephrine) given by intramuscular injection into the outer middle thigh: for "
     "an adult the dose is 0.5 mg, which is 0.5 mL of the 1 mg/mL (1:1000) solution, or "
     "one adult auto-injector. Call emergency services straight away, lay the person "
     "flat with their legs raised (or let them sit up if they are struggling to "
     "breathe), and give a second dose after 5 minutes if there is no improvement. "
     "Antihistamines and steroids may be given later but are not a substitute for "
     "adrenaline.",
     "Give adrenaline (epinephrine) into the outer thigh muscle straight away. The adult "
     "dose is 5 mg, which is 5 mL of the 1 mg/mL (1:1000) solution. Call an ambulance, "
     "lay the person down with legs raised unless breathing is difficult, and repeat "
     "the dose after 5 minutes if symptoms do not improve. Antihistamines do not "
     "replace adrenaline.",
     F, J),
    ("Give the capital, currency and official languages of Switzerland as JSON.",
     '{"capital": "Bern", "currency": "Swiss franc (CHF)", '
     '"official_languages": ["German", "French", "Italian", "Romansh"]}',
     '{\n  "official_languages": ["German", "French", "Italian", "Romansh"],\n'
     '  "currency": "CHF (Swiss franc)",\n  "capital": "Bern"\n}',
     T, J),
    ('Extract the order as JSON: "Two large pizzas and one cola, delivered to 12 High Street."',
     '{"items": [{"name": "pizza", "size": "large", "quantity": 2}, '
     '{"name": "cola", "quantity": 1}], "address": "12 High Street"}',
     '{"items": [{"name": "pizza", "size": "large", "quantity": 1}, '
     '{"name": "cola", "quantity": 1}], "address": "12 High Street"}',
     F, J),
    ("Return the standard reason phrases of HTTP status codes 200, 404 and 500 as a JSON object.",
     '{"200": "OK", "404": "Not Found", "500": "Internal Server Error"}',
     '```json\n{\n  "200": "OK",\n  "404": "Not Found",\n  "500": "Internal Server Error"\n}\n```',
     T),
    ("Return the recommended adult ibuprofen dosing as JSON with fields drug, dose_mg, interval_hours, max_daily_mg.",
     '{"drug": "ibuprofen", "dose_mg": 400, "interval_hours": 6, "max_daily_mg": 1200}',
     '{"drug": "ibuprofen", "dose_mg": 4000, "interval_hours": 6, "max_daily_mg": 1200}',
     F),
    ("How do you perform CPR on an adult?",
     "1. Check the scene is safe and that the person is unresponsive and not breathing "
     "normally.\n2. Call emergency services, or ask someone else to, and send for a "
     "defibrillator (AED).\n3. Kneel beside the person, place the heel of one hand in "
     "the centre of the chest with the other hand on top.\n4. Give 30 chest compressions, "
     "pressing down 5 to 6 cm at a rate of 100 to 120 per minute and letting the chest "
     "rise fully between compressions.\n5. Open the airway with a head tilt and chin "
     "lift and give 2 rescue breaths, each lasting about one second.\n6. Continue cycles "
     "of 30 compressions and 2 breaths until help arrives, an AED is ready to use, or "
     "the person starts breathing normally.",
     "1) Make sure it is safe to approach and check whether the person responds and "
     "breathes normally. 2) Call 911/112 (or get someone to call) and ask for an AED. "
     "3) Put the heel of your hand on the middle of the chest, other hand on top. "
     "4) Do 30 compressions, 5-6 cm deep, 100-120 per minute, allowing full recoil. "
     "5) Tilt the head back, lift the chin and give 2 breaths of about a second each. "
     "6) Keep repeating 30:2 until professionals take over, the AED is attached, or the "
     "person breathes normally.",
     T),
    ("How do you change a flat tyre on a car?",
     "1. Park on flat, firm ground away from traffic, turn on the hazard lights and "
     "apply the parking brake.\n2. Take out the spare wheel, the jack and the wheel "
     "wrench.\n3. Loosen the wheel nuts about half a turn while the wheel is still on "
     "the ground.\n4. Place the jack at the jacking point nearest the flat tyre and "
     "raise the car until the tyre is clear of the ground.\n5. Remove the nuts and the "
     "flat wheel, fit the spare, and hand-tighten the nuts.\n6. Lower the car, then "
     "tighten the nuts fully in a diagonal (star) pattern.\n7. Check the spare's "
     "pressure and get the flat repaired or replaced soon.",
     "1. Stop somewhere safe and level, switch on the hazard lights and put the "
     "handbrake on.\n2. Get out the spare, jack and wrench.\n3. Jack the car up until "
     "the wheel is off the ground.\n4. Fully tighten the wheel nuts in a circle while the "
     "car is still on the jack, then remove them.\n5. Swap the flat wheel for the spare "
     "and put the nuts back on.\n6. Lower the car and drive on.",
     F),
    ("How do you undo the last Git commit but keep its changes in your working tree?",
     "Run git reset --soft HEAD~1. This moves the current branch back by one commit but "
     "leaves the index and the working tree untouched, so all the changes from the "
     "undone commit stay staged and ready to be committed again. If you want the "
     "changes kept but unstaged, use git reset --mixed HEAD~1 (the default mode of git "
     "reset). Avoid git reset --hard HEAD~1, which also discards the changes. If the "
     "commit has already been pushed and others may have pulled it, prefer git revert, "
     "which adds a new commit that undoes it instead of rewriting history.",
     "Use git reset --hard HEAD~1. It removes the last commit and resets your files to "
     "the state of the previous commit, giving you a clean working tree to start over "
     "from. If the commit was already pushed, you will need to force-push afterwards "
     "with git push --force.",
     F, J),
    ("Explain the difference between TCP and UDP.",
     "TCP and UDP are both transport-layer protocols on top of IP. TCP is "
     "connection-oriented: it sets up a connection with a three-way handshake, numbers "
     "every byte, retransmits lost segments, delivers data in order, and applies flow "
     "and congestion control. That makes it reliable but adds latency and overhead, so "
     "it suits web pages, email and file transfer. UDP is connectionless: it just sends "
     "independent datagrams with a small header and no delivery, ordering or "
     "duplicate guarantees. It is faster and lighter, and is used where timeliness "
     "matters more than completeness, such as DNS queries, voice and video calls, and "
     "online games.",
     "Both run over IP at the transport layer. TCP opens a connection (SYN, SYN-ACK, "
     "ACK), guarantees that bytes arrive in order, resends anything lost, and slows down "
     "when the network is congested, which makes it dependable but slower; HTTP, SMTP "
     "and FTP rely on it. UDP skips the connection and sends standalone datagrams with "
     "no guarantee of delivery or order, so it has less overhead and lower latency; DNS, "
     "VoIP, streaming and games typically use it.",
     T),
    ("What causes the seasons on Earth?",
     "The seasons are caused by the tilt of the Earth's rotation axis, about 23.4 "
     "degrees relative to the plane of its orbit. As the Earth goes around the Sun, the "
     "axis keeps pointing in the same direction in space, so for part of the year the "
     "Northern Hemisphere leans towards the Sun and for the other part the Southern "
     "Hemisphere does. The hemisphere tilted towards the Sun gets sunlight at a steeper "
     "angle and has longer days, so it receives more energy and has summer, while the "
     "other has winter. The changing distance to the Sun plays only a minor role; the "
     "Earth is actually closest to the Sun in early January.",
     "Seasons happen because the Earth's orbit is an ellipse. In summer the Earth is "
     "much closer to the Sun and receives more heat, and in winter it is farther away "
     "and receives less. The tilt of the axis only changes the length of the day "
     "slightly and has little effect on temperature.",
     F),
    ("Briefly summarise the causes of the First World War.",
     "Historians usually group the long-term causes of the First World War as "
     "militarism, alliances, imperialism and nationalism. The great powers were in an "
     "arms race, especially the Anglo-German naval race, and had rigid mobilisation "
     "plans. Europe was split into two blocs, the Triple Alliance of Germany, "
     "Austria-Hungary and Italy and the Triple Entente of France, Russia and Britain. "
     "Colonial rivalries and nationalist movements, particularly in the Balkans, raised "
     "tensions further. The immediate trigger was the assassination of Archduke Franz "
     "Ferdinand of Austria-Hungary in Sarajevo on 28 June 1914, which led to an "
     "Austro-Hungarian ultimatum to Serbia and a chain of declarations of war.",
     "The deep causes are often remembered as MAIN: militarism (an arms race and "
     "mobilisation plans), alliances (the Triple Alliance against the Triple Entente), "
     "imperialism (competition for colonies) and nationalism (notably in the Balkans). "
     "The spark was the killing of Archduke Franz Ferdinand in Sarajevo in June 1914; "
     "Austria-Hungary's ultimatum to Serbia then pulled the alliance systems into war.",
     T, J),
    ("How does compound interest work? Give an example.",
     "With compound interest, the interest earned in each period is added to the "
     "principal, so the next period's interest is calculated on a larger balance. The "
     "balance after n periods is P(1 + r)^n, where P is the principal and r the rate per "
     "period. For example, $1,000 invested at 5% a year compounded annually grows to "
     "$1,050 after one year and $1,102.50 after two years, because in the second year "
     "interest is also earned on the first year's $50. Simple interest, by contrast, "
     "would give $1,100 after two years. The more often interest compounds, the faster "
     "the balance grows.",
     "Compound interest means you earn interest on your interest. Each period the "
     "interest is added to the balance, and the next period's interest is worked out on "
     "the new total. Example: $1,000 at 5% per year becomes $1,050 after one year and "
     "$1,100 after two years. Over long periods this snowball effect is what makes "
     "saving early so powerful.",
     F),
    ("What is a hash map, and how fast is a lookup?",
     "A hash map (hash table) stores key-value pairs in an array of buckets. A hash "
     "function turns each key into an index, so the value can be found by jumping "
     "straight to the right bucket instead of searching the whole collection. Different "
     "keys can land in the same bucket (a collision), which is handled by chaining or "
     "open addressing, and the table is resized when it gets too full. With a good hash "
     "function, lookup, insertion and deletion take O(1) time on average. In the worst "
     "case, when many keys collide, an operation can degrade to O(n).",
     "A hash map keeps key-value pairs and uses a hash function to decide where each "
     "key is stored. Collisions are resolved by chaining or probing, and the map grows "
     "when its load factor gets too high. Lookups take O(log n) time on average, like a "
     "balanced binary search tree, and O(n) in the worst case.",
     F),
    ("Describe the water cycle.",
     "The water cycle is the continuous movement of water between the Earth's surface "
     "and the atmosphere. Heat from the Sun evaporates water from oceans, lakes and "
     "rivers, and plants release water vapour through transpiration. As the moist air "
     "rises it cools, and the vapour condenses into tiny droplets that form clouds. When "
     "the droplets combine and grow heavy enough they fall as precipitation: rain, snow, "
     "sleet or hail. The water then runs off into rivers and the sea, soaks into the "
     "ground to recharge groundwater, or is stored as ice, and the cycle begins again.",
     "Water keeps circulating between the ground and the sky. The Sun's heat makes water "
     "evaporate from seas, lakes and rivers, and plants give off vapour too "
     "(transpiration). Rising air cools, so the vapour condenses into droplets and "
     "clouds form. Droplets merge and fall back as rain, snow, sleet or hail. That water "
     "flows over land into rivers and oceans, seeps underground into aquifers, or is "
     "locked up in ice, and then it evaporates again.",
     T),
    ("What is the time complexity of binary search, and why?",
     "Binary search runs in O(log n) time on a sorted array of n elements. At each step "
     "it compares the target with the middle element of the current range. If they are "
     "equal the search ends; if the target is smaller it continues in the left half, "
     "otherwise in the right half. Each comparison halves the number of remaining "
     "candidates, so after k steps at most n / 2^k elements are left, and the search "
     "finishes after about log2(n) + 1 comparisons. It needs O(1) extra space in its "
     "iterative form. The array must be sorted; otherwise the halving argument fails.",
     "O(log n). Binary search works on sorted data and checks the middle element: if it "
     "matches it stops, otherwise it throws away the half that cannot contain the target "
     "and repeats on the other half. Because the search space halves every time, a list "
     "of a million items needs only about 20 comparisons. The iterative version uses "
     "constant extra memory.",
     T),
    ("What is the capital of Italy?",
     "Rome",
     "The capital of Italy is Rome. It has been the capital since 1871, shortly after "
     "Italian unification, and it is also the country's largest city, with about 2.8 "
     "million residents. Rome is located in the Lazio region in the centre of the "
     "peninsula, on the River Tiber. It is famous for ancient sites such as the "
     "Colosseum and the Roman Forum, and it surrounds Vatican City, the independent "
     "city-state that is the seat of the Pope. Its nickname is the Eternal City.",
     T),
]

# --- unicode: accents, ß, CJK, emoji, full-width digits, ligatures, odd whitespace
UNICODE = [
    ("What is the capital of Iceland?", "Reykjavík", "Reykjavik", T),
    ('What is the German word for "street"?', "Straße", "Strasse", T, J),
    ('Who composed "Für Elise"?', "Ludwig van Beethoven", "Beethoven", T),
    ("What is the capital of Japan, written in Japanese?", "東京", "東京", T),
    ('How do you say "thank you" in Japanese?', "ありがとう", "arigatō", T, J),
    ("What is 4 × 5?", "20", "２０", T),
    ("How many days are in a week?", "7", "７ days", T),
    ('What is the French word for "coffee"?', "café", "Café", T),
    ("In which city is the Sagrada Família?", "Barcelona", "Barcelona 🇪🇸", T),
    ("Which emoji usually means approval or 'thumbs up'?", "👍", "👍", T),
    ("What do you call a sum of money paid as a penalty?", "fine", "ﬁne", T),
    ('Who wrote "Les Misérables"?', "Victor Hugo", "Victor Hugo", T),
    ("What is the capital of Côte d'Ivoire?", "Yamoussoukro", "Abidjan", F, J),
    ("Which Greek letter denotes the ratio of a circle's circumference to its diameter?",
     "π", "pi", T),
    ("What is the chemical formula of water?", "H₂O", "H2O", T),
    ("What is the unit of electrical resistance?", "Ohm (Ω)", "ohm", T),
    ('Who painted "Las Meninas"?', "Diego Velázquez", "Velazquez", T),
    ("What is the capital of China?", "北京 (Beijing)", "Beijing", T),
    ('In which language does "спасибо" mean "thank you"?', "Russian", "русский", T),
    ("At what temperature does water freeze?", "0 °C", "０℃", T),
    ("What is the capital of Denmark?", "København (Copenhagen)", "Copenhagen", T),
    ("Which symbol stands for the euro?", "€", "EUR", T),
    ("Which animal does the emoji 🐼 show?", "A giant panda", "panda 🐼", T),
    ('Who wrote "Don Quijote"?', "Miguel de Cervantes", "Cervantes Saavedra", T),
    ("What is the capital of Türkiye?", "Ankara", "Αθήνα", F, J),
    ('What is the Japanese word for "mountain"?', "山 (yama)", "川 (kawa)", F),
    ("Write one half using a single Unicode character.", "½", "1⁄2", T),
    ("What is the capital of Norway?", "Oslo", "Oslo\u00a0", T),
    ('What is the French word for "summer"?', "été", "e\u0301te\u0301", T),
    ('How do you say "peace" in Arabic?', "سلام", "salaam", T),
]

# --- contains: the reference inside a longer output (and substring traps)
CONTAINS = [
    ("What is the answer to the ultimate question in The Hitchhiker's Guide to the Galaxy?",
     "42", "The answer is 42.", T, J),
    ("Who wrote \"Hamlet\"?", "William Shakespeare",
     "Hamlet was written by William Shakespeare around 1600.", T),
    ("What is the chemical symbol for silver?", "Ag",
     "The chemical symbol for silver is Ag, from the Latin argentum.", T),
    ("How many planets are in the Solar System today?", "8",
     "There are 8 planets in the Solar System.", T),
    ("What is the smallest ocean?", "Arctic Ocean",
     "The smallest of the world's oceans is the Arctic Ocean.", T),
    ("Which country hosted the 2016 Summer Olympics?", "Brazil",
     "The 2016 Summer Olympics were held in Rio de Janeiro, Brazil.", T),
    ("In what year did the Second World War begin?", "1939",
     "It began in 1939, when Germany invaded Poland.", T),
    ("What is 6 times 7?", "42", "The answer is 420.", F, J),
    ("What is the capital of Austria?", "Vienna",
     "The capital is not Vienna; it is Salzburg.", F, J),
    ("Which planet is the closest to the Sun?", "Mercury",
     "Mercury is often guessed, but the answer is Venus.", F),
    ("What is the chemical symbol for tin?", "Sn", "The symbol is SN.", T),
    ("What is the capital of Egypt?", "Cairo",
     "Cairo is the capital and largest city of Egypt, on the Nile.", T),
    ("Who reached the Americas in 1492 sailing for Spain?", "Christopher Columbus",
     "In 1492 Christopher Columbus reached the Caribbean with three ships.", T),
    ("How many sides does a triangle have?", "3", "A triangle has 3 sides and 3 angles.", T),
    ("What is the largest moon of Jupiter?", "Ganymede",
     "Jupiter's largest moon, Ganymede, is also the largest moon in the Solar System.", T, J),
    ('Who painted "The Scream"?', "Edvard Munch",
     "I think it was Edvard Munch, but it might have been Gustav Klimt.", F, J),
    ("Which element has the chemical symbol O?", "Oxygen", "The answer: oxygen.", T),
    ("What is the boiling point of water in Fahrenheit?", "212",
     "At sea level, water boils at 212 °F.", T),
    ("What is the capital of Kenya?", "Nairobi",
     "Nairobi. It is also the largest city in Kenya.", T),
    ('What does "www" stand for?', "World Wide Web", '"www" stands for World Wide Web.', T),
    ("What is the capital of Pakistan?", "Islamabad",
     "People often say Islamabad or Karachi; it is Karachi.", F),
    ("How many bytes are in a kilobyte, using SI units?", "1000",
     "In SI units a kilobyte is 1000 bytes, while a kibibyte is 1024 bytes.", T),
    ("Who was the first woman to fly solo across the Atlantic?", "Amelia Earhart",
     "Amelia Earhart, in 1932.", T),
    ("What is normal human body temperature in degrees Celsius?", "37",
     "About 37 °C, although anything from 36.1 to 37.2 is considered normal.", T),
    ("Which is the largest continent?", "Asia",
     "Asia is the largest continent by both area and population.", T),
]

# --- nulls: missing or empty values
NULLS = [
    ("What is the capital of Portugal?", None, "Lisbon", None),
    ('Who wrote "The Hobbit"?', "J. R. R. Tolkien", None, None, J),
    ("What is the capital of Greece?", "Athens", "", F, J),
    ("What is the chemical symbol for lead?", "Pb", "   \t\n", F),
    ("What is 9 times 9?", "", "81", None),
    ("Which river flows through Vienna?", None, None, None),
    ("In which year did euro banknotes and coins enter circulation?", "2002", "", F),
    ("What is the capital of Poland?", "Warsaw", "\u3000\u00a0", F),
    ("What is the square root of 49?", "", "", None),
    ("What colour is a clear daytime sky?", "  ", "Blue", None),
]

# --- repeated: one (question, reference) scored again and again (nightly re-runs)
# (question, reference, [(output, expected_meaning_match[, J]), ...])
REPEATED = [
    ("What is the capital of Kazakhstan?", "Astana", [
        ("Astana", T),
        ("astana.", T),
        ("Almaty", F, J),
        ("It is Astana.", T),
        ("Astana or Almaty", F),
        ("Astana (formerly called Nur-Sultan)", T, J),
    ]),
    ("How many elements are in the periodic table?", "118", [
        ("118", T),
        ("one hundred eighteen", T),
        ("There are 118 known elements.", T),
        ("116", F),
        ("about 120", F, J),
    ]),
    ('Who wrote the novel "One Hundred Years of Solitude"?', "Gabriel García Márquez", [
        ("Gabriel García Márquez", T),
        ("Gabriel Garcia Marquez", T),
        ("García Márquez", T),
        ("Mario Vargas Llosa", F),
        ("Jorge Luis Borges, I think", F),
    ]),
    ("What is the maximum daily dose of paracetamol for a healthy adult?",
     "4 grams (4,000 mg) in 24 hours", [
        ("4 g per day", T),
        ("4000 mg per 24 hours", T),
        ("8 g a day", F, J),
        ("Four grams a day", T, J),
        ("2 grams", F),
        ("No more than 4 g in 24 hours, in doses at least 4 hours apart.", T),
    ]),
    ("In what year did Apollo 11 land on the Moon?", "1969", [
        ("1969", T),
        ("In 1969.", T),
        ("On July 20, 1969", T),
        ("1968", F),
    ]),
    ("What is the time complexity of binary search?", "O(log n)", [
        ("O(log n)", T),
        ("logarithmic time", T, J),
        ("O(n)", F),
        ("O(log n) on a sorted array", T),
        ("O(n log n)", F),
    ]),
    ("What is the main language of Quebec?", "French", [
        ("French", T),
        ("Québécois French", T),
        ("English", F),
        ("French and English, equally", F),
    ]),
]

CATEGORIES = [
    ("exact", EXACT),
    ("paraphrase", PARAPHRASE),
    ("number_words", NUMBER_WORDS),
    ("wrong", WRONG),
    ("hedged", HEDGED),
    ("multi_fact", MULTI_FACT),
    ("long", LONG),
    ("unicode", UNICODE),
    ("contains", CONTAINS),
    ("nulls", NULLS),
]

SCHEMA = pa.schema([
    pa.field("id", pa.string(), nullable=False),
    pa.field("question", pa.string(), nullable=False),
    pa.field("reference", pa.string()),
    pa.field("output", pa.string()),
    pa.field("category", pa.string(), nullable=False),
    pa.field("expected_meaning_match", pa.bool_()),
    pa.field("judge", pa.bool_(), nullable=False),
])


def _flat_rows():
    """Yield (category, question, reference, output, label, judge) in file order."""
    for category, rows in CATEGORIES:
        for row in rows:
            question, reference, output, label, *rest = row
            yield category, question, reference, output, label, rest == [J]
    for question, reference, outputs in REPEATED:
        for output, label, *rest in outputs:
            yield "repeated", question, reference, output, label, rest == [J]


def build_table() -> pa.Table:
    cols = {name: [] for name in SCHEMA.names}
    for n, (category, question, reference, output, label, judge) in enumerate(_flat_rows(), 1):
        # The label is only meaningful when both sides carry an answer.
        if reference is None or output is None or not reference.strip():
            assert label is None, (category, question)
        cols["id"].append(f"qa-{n:04d}")
        cols["question"].append(question)
        cols["reference"].append(reference)
        cols["output"].append(output)
        cols["category"].append(category)
        cols["expected_meaning_match"].append(label)
        cols["judge"].append(judge)
    return pa.table(cols, schema=SCHEMA)


def main() -> None:
    table = build_table()
    pq.write_table(table, OUT_PATH, compression="zstd", row_group_size=ROW_GROUP_SIZE)

    print(f"wrote {OUT_PATH} ({table.num_rows} rows)")
    print(f"{'category':<14}{'rows':>5}{'true':>6}{'false':>6}{'null':>6}{'judge':>7}")
    for category in [c for c, _ in CATEGORIES] + ["repeated"]:
        sub = [r for r in _flat_rows() if r[0] == category]
        labels = [r[4] for r in sub]
        print(f"{category:<14}{len(sub):>5}{labels.count(True):>6}{labels.count(False):>6}"
              f"{labels.count(None):>6}{sum(r[5] for r in sub):>7}")
    judged = [r[4] for r in _flat_rows() if r[5]]
    print(f"judge rows: {len(judged)} (true {judged.count(True)}, false {judged.count(False)}, "
          f"null {judged.count(None)})")


if __name__ == "__main__":
    main()
