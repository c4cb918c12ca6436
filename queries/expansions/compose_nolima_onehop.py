"""Compose the shipped expansions of queries/nolima-onehop.json from our hand-written vocabulary.

No LLM was used: we wrote, per question, search terms for its facets (QUESTION_TERMS), per
category the terms of that domain (CATEGORY_TERMS), and a pool of general terms of
"which person ..." searches (GENERAL_TERMS). An expansion of size N takes them in that order
(question, category, general), de-duplicated, and keeps the first N. No character name and no
needle text occurs in any term; `embedeval.expansion.validate_expansions` checks it.

Run from the repository root:  python queries/expansions/compose_nolima_onehop.py
"""

from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SIZES = (100, 150, 250)

QUESTION_TERMS = {
    "loc-dresden": "Dresden, Saxony, Germany, Elbe river, Saxon capital, Frauenkirche, Zwinger palace, opera, Baroque old town, Neustadt, Augustus the Strong, Green Vault, Semperoper, Brühl's Terrace, Elbflorenz, Striezelmarkt, Dresden porcelain, Meissen, Saxon Switzerland, east German city, Dresden trip, Dresden visit, visited Dresden, German city break, Dresden residence, Dresden apartment, Dresden tourism, Dresden landmarks, Dresden concerts, Dresden architecture",
    "loc-peru": "Peru, Lima, Cusco, Andes, Inca empire, Sacred Valley, Lake Titicaca, Arequipa, Peruvian cuisine, ceviche, llamas, alpacas, Quechua, Amazon rainforest, Nazca lines, Urubamba river, Peruvian highlands, South America trip, Andean trek, Rainbow Mountain, Colca Canyon, Peruvian sol, pisco, visited Peru, travel to Peru, backpacking Peru, Peruvian ruins, ancient citadel, mountain ruins, altitude sickness",
    "loc-egypt": "Egypt, Cairo, Nile river, pyramids, pharaohs, Sphinx, Giza plateau, Luxor, Valley of the Kings, Aswan, Alexandria, Red Sea, Sinai, desert, hieroglyphs, ancient tombs, Egyptian museum, felucca, Nile cruise, Abu Simbel, Karnak temple, Egyptian pound, visited Egypt, travel to Egypt, North Africa trip, camel ride, archaeology, mummies, Saqqara, Egyptian antiquities",
    "loc-australia": "Australia, Sydney, Melbourne, Harbour Bridge, Bondi Beach, Great Barrier Reef, outback, Uluru, kangaroos, koalas, Canberra, Brisbane, Perth, Tasmania, Aussie, down under, New South Wales, Circular Quay, harbour city, Australian dollar, visited Australia, travel to Australia, working holiday, Australian summer, gum trees, surf beaches, Blue Mountains, Queensland, Victoria, Southern Hemisphere trip",
    "diet-vegan": "meat, vegetarian, plant-based diet, no animal products, tofu, tempeh, lentils, beans, dietary choice, animal welfare, meatless, vegan cheese, seitan, soy milk, plant protein, no beef, no chicken, no pork, no fish, herbivore diet, ethical eating, cruelty-free, veggie burger, legumes, nutritional yeast, dietary restriction, food preferences, refuses steak, avoids meat, salad",
    "diet-lactose": "milk, dairy, lactose, dairy-free, oat milk, almond milk, soy milk, cheese, butter, cream, yogurt, lactase enzyme, digestive problems, bloating, stomach upset, intolerance, dairy allergy, lactose-free milk, cow's milk, milkshake, ice cream, coffee with milk, latte, cappuccino, dietary restriction, digestive system, gut health, avoids dairy, cannot digest, milk sugar",
    "diet-celiac": "bread, gluten, wheat, gluten-free, barley, rye, flour, pasta, baked goods, sourdough, toast, autoimmune condition, small intestine, coeliac, gluten intolerance, wheat allergy, gluten-free bakery, rice flour, cornbread, dietary restriction, diagnosis, stomach pain, digestive health, crumbs, sandwiches, pastries, cereal grains, avoids wheat, cannot eat gluten, special diet",
    "diet-kosher": "pork, kosher, Jewish dietary laws, kashrut, halal, bacon, ham, pig, forbidden foods, religious diet, synagogue, rabbi, Torah, observant, meat and dairy separation, kosher certification, kosher butcher, Sabbath, Passover, faith, religious observance, Orthodox Jewish, Muslim diet, sausages, pork chops, pulled pork, dietary law, avoids pork, food rules, religious restriction",
    "med-diabetes": "diabetes, blood sugar, glucose, insulin, type 1 diabetes, type 2 diabetes, pancreas, glucose meter, finger prick, blood glucose monitoring, diabetic, hyperglycemia, hypoglycemia, HbA1c, carbohydrates, sugar levels, endocrinologist, syringe, insulin pen, insulin pump, chronic condition, metabolic disease, diet control, sugar-free, diabetic diet, medication, injections, medical condition, health problem, pricking fingers",
    "med-asthma": "asthma, breathing, lungs, wheezing, shortness of breath, airways, bronchial, puffer, bronchodilator, asthma attack, allergies, pollen, dust, respiratory condition, chronic illness, albuterol, steroid, spacer, cough, tight chest, pulmonologist, breathing problems, allergic reaction, exercise-induced asthma, medical condition, health problem, breath, lung function, air quality, respiratory",
    "med-hearing": "hearing, deaf, deafness, hearing loss, hearing aid, audiologist, ears, ear doctor, sign language, lip reading, hard of hearing, tinnitus, sound, audiology, inner ear, auditory nerve, cochlea, implant surgery, listening, volume, subtitles, captions, disability, medical device, ENT specialist, hearing impairment, hearing test, earpiece, sound processor, audio",
    "med-heart": "heart, heart condition, cardiac, cardiology, cardiologist, arrhythmia, heartbeat, heart rhythm, heart disease, heart attack, chest pain, surgery, cardiac device, ECG, electrocardiogram, blood pressure, cholesterol, circulation, cardiovascular, heart surgery, implanted device, irregular pulse, heart failure, medication, hospital, chronic condition, health problem, pulse, artery, cardiac care",
    "lang-portuguese": "Portuguese, Portugal, Lisbon, Porto, Brazil, Portuguese language, Lusophone, fado, Algarve, Iberian, native speaker, bilingual, fluent, mother tongue, Brazilian Portuguese, European Portuguese, Portuguese speaker, Coimbra, Madeira, Azores, Tagus river, Alfama, trams, pastel de nata, grew up abroad, childhood abroad, language skills, foreign language, speaks fluently, translation",
    "lang-greek": "Greek, Greece, Athens, Acropolis, Parthenon, Greek language, Hellenic, Thessaloniki, Greek islands, Aegean, Crete, Mediterranean, native speaker, bilingual, fluent, mother tongue, Greek alphabet, ancient Greece, modern Greek, Greek speaker, grew up in Greece, Greek childhood, Plaka, souvlaki, Greek family, language skills, foreign language, speaks fluently, translation, Piraeus",
    "lang-hungarian": "Hungarian, Hungary, Budapest, Magyar, Danube, Buda, Pest, Hungarian language, Finno-Ugric, native speaker, bilingual, fluent, mother tongue, Hungarian speaker, Central Europe, Lake Balaton, goulash, paprika, Chain Bridge, thermal baths, Hungarian parliament, Debrecen, Szeged, born in Hungary, raised in Hungary, language skills, foreign language, speaks fluently, translation, Hungarian family",
    "lang-dutch": "Dutch, Netherlands, Holland, Amsterdam, Rotterdam, The Hague, Utrecht, Dutch language, canals, houseboat, native speaker, bilingual, fluent, mother tongue, Dutch speaker, Flemish, bicycles, tulips, windmills, Jordaan, Dutch childhood, grew up in the Netherlands, Low Countries, Amstel, Dutch family, language skills, foreign language, speaks fluently, translation, Dutch culture",
    "job-pilot": "plane, pilot, aviation, flying, aircraft, airliner, airline, captain, first officer, cockpit crew, flight deck, pilot licence, flight hours, flight school, jet, Boeing, Airbus, air travel, airport, runway, takeoff, landing, air traffic control, commercial aviation, aviator, fly a plane, flight training, aeronautics, professional background, career",
    "job-lawyer": "law, lawyer, attorney, legal, law school, bar exam, barrister, solicitor, counsel, litigation, courtroom, judge, legal practice, law firm, legal training, juris doctor, legal career, contracts, legislation, legal advice, advocate, prosecutor, defense attorney, licensed to practise, legal profession, law degree, trained in law, professional background, career, qualification",
    "job-chef": "kitchen, restaurant, chef, cook, cooking, culinary, cuisine, head chef, sous chef, line cook, bistro, menu, recipes, catering, culinary school, kitchen staff, commercial kitchen, dinner service, food preparation, gastronomy, restaurant industry, professional cook, restaurant work, kitchen brigade, knife skills, stove, oven, plating, professional background, career",
    "job-teacher": "children, teacher, teaching, school, classroom, pupils, students, kindergarten, preschool, primary school, early education, educator, lessons, curriculum, young learners, infants, toddlers, childcare, school day, teaches children, nursery, playground, homework, education, pedagogy, works with kids, elementary school, early childhood, professional background, career",
    "hobby-chess": "chess, chess player, chessboard, checkmate, grandmaster, international master, chess tournament, chess club, openings, endgame, rating, Elo, FIDE, chess champion, chess pieces, king, queen, knight, bishop, rook, pawn, strategy game, board game, blitz chess, chess prodigy, chess title, competitive chess, hobby, pastime, plays chess",
    "hobby-piano": "piano, pianist, keyboard, classical music, Chopin, nocturnes, recital, concert, sonata, piano lessons, conservatory, sheet music, grand piano, upright piano, performs music, musician, Romantic composer, Beethoven, Mozart, Liszt, piano keys, practice, playing music, music performance, instrument, concert hall, plays the piano, hobby, pastime, weekend recitals",
    "hobby-mountain": "mountain, mountaineering, climbing, summit, peak, hiking, trekking, Kilimanjaro, Everest, Alps, Andes, Himalaya, altitude, expedition, ascent, base camp, alpine, rock climbing, mountain guide, hiking boots, Tanzania, Africa's highest peak, reached the top, volcano, glacier, trail, adventure, outdoor sports, hobby, pastime",
    "hobby-surf": "surfing, surfer, surfboard, waves, ocean, beach, longboard, shortboard, wetsuit, swell, break, paddling, surf spot, tide, coast, sea, barrel, wipeout, water sports, surf school, dawn patrol, board riding, surf culture, Hawaii, Bali, goes surfing, outdoor sports, hobby, pastime, seaside",
}

CATEGORY_TERMS = {
    "location": "travel, trip, journey, visit, holiday, vacation, tourism, tourist, sightseeing, landmark, monument, city, capital, country, abroad, foreign country, overseas, passport, visa, airport, flight, hotel, accommodation, lived abroad, resident, neighbourhood, address, apartment, home, house, street, district, old town, square, museum, cathedral, palace, river, bridge, map, geography, destination, itinerary, guidebook, postcard, souvenir, local culture, locals, expat, relocation, moved to, stayed in, spent time in, has been to, went to, travelled to, visited, lives near, next to",
    "dietary": "diet, food, eating, meals, nutrition, dietary restriction, food allergy, intolerance, menu, restaurant, cooking, recipes, ingredients, groceries, supermarket, breakfast, lunch, dinner, snacks, plate, kitchen, chef, health, healthy eating, avoids, cannot eat, cannot drink, refuses, forbidden, allowed foods, label, substitute, alternative, preference, lifestyle, belief, choice, religion, ethics, body, digestion, stomach, reaction, symptoms, doctor's advice, special diet, free-from, order, waiter, dinner party, host, guest, feast, cuisine, taste",
    "medical": "medical condition, health, illness, disease, chronic condition, diagnosis, symptoms, treatment, therapy, medication, prescription, doctor, physician, specialist, hospital, clinic, nurse, patient, check-up, appointment, surgery, operation, device, implant, monitor, test results, medical history, health record, condition management, daily routine, side effects, recovery, care, emergency, pharmacy, pills, injection, procedure, wellbeing, fitness, limitations, disability, support, insurance, medical advice, health problem, ailment, disorder, suffers from, lives with, diagnosed, treated for, affected by, manages",
    "language": "language, speaks, speaker, fluent, fluency, native speaker, mother tongue, first language, second language, bilingual, multilingual, polyglot, accent, dialect, vocabulary, grammar, pronunciation, conversation, translation, translator, interpreter, reading, writing, literature, newspapers, songs, films, subtitles, childhood, grew up, raised, born, hometown, family, parents, school, education, culture, heritage, nationality, citizen, foreign language, language skills, language learning, lessons, classes, abroad, immersion, understands, communicates, talks, chats, phrases, words, expressions",
    "professional": "job, work, career, profession, occupation, employment, employer, company, workplace, office, colleague, boss, manager, team, experience, years of experience, skills, expertise, training, qualification, degree, certificate, licence, exam, course, apprenticeship, education, university, college, school, specialist, professional, expert, trained, competent, salary, shift, schedule, duties, responsibilities, position, role, title, promotion, retired, former, background, CV, resume, industry, field, trade, craft, works as, employed as, knows how to",
    "hobbies": "hobby, pastime, leisure, free time, weekend, spare time, interest, passion, activity, sport, game, practice, training, club, team, competition, tournament, championship, medal, title, achievement, skill, talent, amateur, professional, coach, lessons, equipment, gear, season, outdoor, indoor, fun, enjoyment, relaxation, adventure, challenge, goal, record, performance, audience, event, festival, fan, enthusiast, regular, routine, every morning, every evening, dawn, plays, goes, does, enjoys, loves",
}

GENERAL_TERMS = "character, person, people, individual, someone, somebody, man, woman, friend, neighbour, acquaintance, family member, relative, sibling, parent, child, partner, spouse, colleague, stranger, resident, citizen, local, guest, visitor, traveller, participant, member, name, identity, who, which one, one of them, story, narrative, tale, account, anecdote, episode, scene, passage, paragraph, sentence, mention, reference, remark, comment, detail, fact, information, clue, hint, evidence, statement, claim, description, biography, life story, personal history, background, profile, portrait, personality, character trait, habit, routine, daily life, lifestyle, preference, opinion, belief, memory, recollection, experience, past, childhood, youth, adulthood, years ago, recently, last year, last month, previously, once, often, always, usually, sometimes, never, currently, nowadays, today, these days, since, for years, decade, long time, ago, later, afterwards, before, during, while, when, where, why, how, what, place, location, area, region, town, village, country, world, home, house, room, building, street, road, neighbourhood, community, society, culture, tradition, custom, event, occasion, situation, circumstance, condition, state, status, ability, capability, knowledge, skill, talent, trait, quality, feature, aspect, facet, attribute, characteristic, property, kind, type, sort, category, group, example, instance, case, question, answer, query, search, look up, find, identify, determine, figure out, discover, reveal, learn, know, understand, recognize, notice, observe, describe, explain, tell, say, mention, note, state, report, indicate, suggest, imply, relate, connect, associate, link, involve, include, concern, regard, matter, topic, subject, theme, issue, point".split(", ")


def split(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


def compose(needle_set: dict, size: int) -> dict[str, list[str]]:
    out = {}
    for group in needle_set["groups"]:
        terms, seen = [], set()
        for term in split(QUESTION_TERMS[group["id"]]) + split(CATEGORY_TERMS[group["category"]]) + GENERAL_TERMS:
            if term.lower() not in seen:
                seen.add(term.lower())
                terms.append(term)
        if len(terms) < size:
            raise SystemExit(f"{group['id']}: only {len(terms)} distinct terms, need {size}")
        out[group["id"]] = terms[:size]
    return out


def main() -> None:
    needle_set = json.loads((ROOT / "queries" / "nolima-onehop.json").read_text())
    data = {
        "needle_set": needle_set["name"],
        "model": "hand-written (no LLM)",
        "prompt": "none: terms written by the embedeval developers per question facet, category and general search terms",
        "temperature": None,
        "created": "2026-11-23",
        "how": "queries/expansions/compose_nolima_onehop.py: question terms, then category terms, then general terms, de-duplicated, first N kept",
        "sizes": {str(size): compose(needle_set, size) for size in SIZES},
    }
    target = ROOT / "queries" / "expansions" / "nolima-onehop.json"
    target.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"wrote {target}")


if __name__ == "__main__":
    main()
