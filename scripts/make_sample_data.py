#!/usr/bin/env python3
# scripts/make_sample_data.py: writes data/rm-static-sample.jsonl, a small data set in the exact
# shape of Dahoas/rm-static (columns prompt, response, chosen, rejected; prompt is a
# "\n\nHuman: ...\n\nAssistant:" dialogue of one or more turns; response == chosen; chosen and
# rejected start with a space), for the README tour and the tests. Deterministic: the same
# script writes the same bytes (a seeded random.Random, no clock, no environment).
#
# The dialogues are built from the hand-written topics below: a first question with a good and
# a poor answer, follow-up turns, and for some topics a long explanation (a few hundred words,
# so that `zerotune prep --max-seq-len 256` truncates a few samples).
#
# Usage: python3 scripts/make_sample_data.py [--out data/rm-static-sample.jsonl] [--rows 300]
import argparse
import json
import os
import random

# Each topic: the question, a helpful answer (chosen), a poor answer (rejected), follow-ups
# (question, answer) that continue the dialogue, and optionally a long answer to "explain in
# detail".
TOPICS = [
    dict(q="What is a good way to keep basil fresh?",
         a="Trim the stems and keep it in a glass of water on the counter, like cut flowers. Basil does not like the cold of a fridge.",
         bad="Put it in the freezer.",
         follow=[("How long will it last like that?",
                  "Usually about a week. Change the water every day or two and pinch off any leaves that turn dark."),
                 ("Can I freeze it for sauces later?",
                  "Yes. Blend the leaves with a little olive oil and freeze the paste in an ice cube tray, then keep the cubes in a bag.")]),
    dict(q="How many legs does a spider have?",
         a="Spiders have eight legs. Insects, by comparison, have six.",
         bad="Spiders have six legs.",
         follow=[("Are spiders insects then?",
                  "No. Spiders are arachnids, like scorpions, mites and ticks. Besides the extra legs they have two body segments instead of three and no antennae.")]),
    dict(q="Can you suggest a name for a grey cat?",
         a="How about Ash, Smokey, or Pebble? If you like literary names, Gandalf is fun for a grey cat.",
         bad="Cat.",
         follow=[("She is very shy. Any names that fit that?",
                  "For a shy cat you might like Whisper, Shadow, Mouse or Misty. Soft names that are easy to say quietly work well.")]),
    dict(q="How do I boil an egg so the yolk is still soft?",
         a="Bring a pot of water to a gentle boil, lower the egg in with a spoon and cook it for six to seven minutes. Then move it to cold water for a minute so it stops cooking and is easier to peel.",
         bad="Boil it for twenty minutes.",
         follow=[("Why are my eggs so hard to peel?",
                  "Very fresh eggs stick to their shells. Eggs that are a week or two old peel more easily, and starting them in already boiling water helps too."),
                 ("Does the size of the egg matter?",
                  "A little. For large eggs six and a half minutes is a good start; for extra large eggs add about thirty seconds.")],
         long="Sure, here is what happens and how to control it. An egg white sets at a lower temperature than the yolk, so the whole trick is to let the heat reach the white fully while the center of the yolk stays below the point where it turns solid. Start with a pot holding enough water to cover the eggs by a couple of centimeters, and bring it to a full boil before the eggs go in. Starting in boiling water makes the timing repeatable, because the eggs always meet the same temperature. Take the eggs straight from the fridge and lower them gently with a spoon so they do not crack on the bottom. Turn the heat down so the water simmers steadily instead of bubbling hard. For a runny yolk with a just set white, cook large eggs for six minutes. For a jammy yolk that holds its shape, go for seven minutes. At nine minutes the yolk is mostly set but still tender, and at eleven or twelve minutes it is fully hard. When the time is up, move the eggs into a bowl of ice water right away. This stops the cooking, so the yolk does not keep firming up from the heat stored in the egg, and it also makes the white shrink slightly away from the shell, which helps with peeling. Leave them in the cold water for at least two minutes. To peel, tap the wide end first, where the air pocket is, then roll the egg on the counter and peel under a thin stream of water. If you cook at high altitude, water boils at a lower temperature, so add a minute or so. Write down the time that gave you the result you liked, because stoves and pots differ and your own notes are the best guide."),
    dict(q="What is the capital of Australia?",
         a="The capital of Australia is Canberra. Many people guess Sydney, but Canberra was chosen as a compromise between Sydney and Melbourne.",
         bad="Sydney.",
         follow=[("When did it become the capital?",
                  "Canberra was selected in 1908 and the parliament moved there in 1927. Before that, parliament met in Melbourne.")]),
    dict(q="Why is the sky blue?",
         a="Sunlight is scattered by the molecules in the air, and shorter wavelengths like blue are scattered much more than red. So when you look at the sky away from the sun, you mostly see that scattered blue light.",
         bad="Because it reflects the ocean.",
         follow=[("Then why are sunsets red?",
                  "At sunset the light travels through much more air to reach you. Most of the blue is scattered away along the path, so the light that arrives directly is richer in red and orange.")],
         long="The short answer is a process called Rayleigh scattering, but it is worth walking through why it gives blue and not violet. Sunlight contains all visible colors. When it passes through the atmosphere, it meets nitrogen and oxygen molecules that are much smaller than the wavelength of the light. Particles that small scatter light with a strength that grows steeply as the wavelength gets shorter, roughly with the inverse fourth power. Blue light has a wavelength of about 450 nanometers and red about 700, so blue is scattered around five times more strongly than red. That scattered light comes at you from every direction of the sky, which is why the whole dome looks blue rather than just the area around the sun. Violet light is scattered even more than blue, so you might expect a violet sky. There are three reasons it does not look that way. The sun emits less violet than blue, some violet is absorbed high in the atmosphere, and our eyes are much less sensitive to violet. The cones in the eye respond to the mix of scattered colors in a way the brain reads as sky blue. Near the horizon the sky looks paler, because light from there has passed through so much air that it has been scattered many times and the colors mix back toward white. Larger particles such as water droplets and dust scatter all colors about equally, which is why clouds are white and why a hazy or polluted sky looks milky. At sunrise and sunset the direct light crosses a long path through the air, the blue is scattered out before it reaches you, and the remaining light is orange and red. The same physics also explains why distant mountains look bluish."),
    dict(q="How can I get better at remembering people's names?",
         a="Repeat the name back when you are introduced, use it once or twice in the conversation, and connect it to something about the person. Writing new names down after a meeting also helps a lot.",
         bad="You can't, some people are just bad with names.",
         follow=[("What if I already forgot someone's name?",
                  "It is fine to be honest. Saying something like \"I'm sorry, I've forgotten your name\" is much better than avoiding the person, and most people have done the same."),
                 ("Any trick for large groups?",
                  "Focus on a few people at a time rather than everyone at once, and ask a friend to introduce you again if you blank. Looking at a list of attendees beforehand helps too.")]),
    dict(q="What should I pack for a weekend hiking trip?",
         a="Bring layers you can add or remove, a rain jacket, sturdy shoes, plenty of water, snacks, a map, a small first aid kit, sun protection and a headlamp. If you stay overnight, add a sleeping bag rated for the night temperatures.",
         bad="Just bring your phone.",
         follow=[("How much water should I carry?",
                  "A common rule is about half a liter per hour of moderate hiking, more in heat. If there are streams on the route, a filter lets you carry less."),
                  ("What kind of snacks are best?",
                  "Things that are light and dense in energy: nuts, dried fruit, cheese, granola bars and a sandwich or two. Something salty helps on hot days.")],
         long="Here is a packing list that works for most weekend trips in mild weather, with the reasons behind it. Start with clothing in layers. A moisture wicking base layer keeps sweat off your skin, a warm middle layer such as fleece or a light down jacket handles cold evenings, and a waterproof shell protects against wind and rain. Avoid cotton next to the skin, because it stays wet and cold. Pack a spare pair of socks for every day, since dry feet prevent blisters. Good footwear matters more than anything else: shoes or boots you have already worn on a few walks, with soles that grip on wet rock. For navigation, carry a paper map of the area and know how to read it, even if you also use a phone app, because batteries die and signal can disappear in valleys. Bring a headlamp with fresh batteries in case the hike takes longer than planned. For food and water, plan about half a liter of water per hour of walking and carry a filter or tablets if you will refill from streams. Pack easy snacks for the trail and simple meals for the evening. A small first aid kit should hold plasters, blister pads, a bandage, pain relievers, any personal medicine and a pair of tweezers. Sun protection is easy to forget: sunscreen, sunglasses and a hat. If you camp, you also need a tent, a sleeping bag rated a few degrees below the expected low, a sleeping pad for insulation from the ground, and a small stove with fuel. Finally, tell someone where you are going and when you expect to be back."),
    dict(q="Is it safe to charge my phone overnight?",
         a="Yes, modern phones stop charging when the battery is full, so leaving them plugged in overnight is generally safe. Use a good quality charger and keep the phone off your bed so it does not overheat.",
         bad="No, it will explode.",
         follow=[("Does it wear out the battery faster?",
                  "Keeping a battery at full charge for long periods adds a little wear. Many phones now have an optimized charging setting that waits at eighty percent and finishes just before you usually wake up.")]),
    dict(q="What is the difference between weather and climate?",
         a="Weather is what the atmosphere is doing over hours or days: rain today, a heat wave this week. Climate is the long term pattern, usually averaged over thirty years or more, such as how wet or warm a region typically is.",
         bad="They are the same thing.",
         follow=[("So one cold winter doesn't disprove warming?",
                  "Right. A single season is weather. Climate trends show up when you look at averages over many years and over the whole globe.")]),
    dict(q="How do I start learning to play the guitar?",
         a="Get a guitar that is comfortable to hold and keep it tuned. Learn a few open chords like G, C, D and E minor, practice switching between them slowly, and play simple songs that use them. Fifteen minutes every day beats two hours once a week.",
         bad="Buy the most expensive guitar you can find.",
         follow=[("My fingertips hurt. Is that normal?",
                  "Yes, that is normal for the first few weeks. Your fingertips will build calluses. Take short breaks and keep practicing in shorter sessions until they toughen up."),
                 ("Should I learn to read music?",
                  "It helps but it is not required to start. Many guitarists begin with chord charts and tabs, then learn notation later if they want to play classical pieces or read along with other musicians.")],
         long="Starting guitar is mostly about building a routine you enjoy, so here is a plan for the first couple of months. First, the instrument. An acoustic guitar with light gauge strings, or an electric guitar with a small amplifier, are both fine. What matters is that the strings are not too high above the fretboard; a music shop can adjust this for a small fee, and it makes a big difference for a beginner. Buy a clip-on tuner and tune before every session, because an out of tune guitar makes correct playing sound wrong and is discouraging. In the first week, learn how to hold the guitar and the pick, and learn the names of the six strings. Then learn three chords: G major, C major and D major. Place your fingers just behind the frets, press with the tips, and pluck each string one by one to check that every note rings clearly. When a string buzzes, press a little harder or move your finger closer to the fret. In the second and third weeks, practice changing between those chords. Set a slow, steady beat and switch on every fourth beat, even if it sounds clumsy. Speed comes from clean repetition, not from rushing. Add E minor and A minor, and you can already play hundreds of popular songs. After a month, work on a simple strumming pattern, such as down, down, up, up, down, up, and practice it with a metronome. Keep a short list of songs you love and learn one at a time. Around the second month, try learning your first barre chord and a pentatonic scale pattern, which opens the door to simple melodies and solos. Practice a little every day, and record yourself now and then so you can hear your progress."),
    dict(q="What are some easy houseplants for a beginner?",
         a="Pothos, snake plants, ZZ plants and spider plants are all forgiving. They tolerate low light and the occasional missed watering.",
         bad="Orchids are the easiest plants there are.",
         follow=[("How often should I water a snake plant?",
                  "Only when the soil has dried out completely, which is often every two to three weeks, and less in winter. Overwatering is the most common way to kill one."),
                 ("My pothos has yellow leaves. What's wrong?",
                  "Yellow leaves on a pothos usually mean too much water. Let the top few centimeters of soil dry before watering again, and make sure the pot drains.")]),
    dict(q="How do I write a good cover letter?",
         a="Address it to a person if you can, open with the role and why it interests you, then give two or three concrete examples of what you have done that match the job. Keep it under a page and end by saying you would welcome a conversation.",
         bad="Copy the job description and sign your name.",
         follow=[("Should I mention salary expectations?",
                  "Usually not in the cover letter, unless the posting explicitly asks for them. It is better to discuss pay once they are interested in you.")],
         long="A good cover letter does one job: it convinces the reader that you understand what the role needs and that you have already done similar things. Here is a structure that works in most fields. Start by finding a name. A letter addressed to the hiring manager reads as more deliberate than one to whom it may concern, and a quick look at the company website or a professional network often gives you the name. In the first paragraph, say which role you are applying for and give one sentence about why this team or company interests you in particular. Be specific: mention a product, a project, or something about how they work. Generic praise is easy to spot. The middle of the letter is where you earn the interview. Read the job posting and pick the two or three requirements that seem most important. For each, write a short paragraph with a concrete example from your experience, following the pattern of situation, what you did, and the result. Numbers help, such as how much time you saved or how many customers you served, but only if they are true and you can talk about them. Do not repeat your resume line by line; the letter should explain the story behind the most relevant points. If there is something unusual about your application, such as a career change or a gap, a cover letter is the right place to address it briefly and positively. In the last paragraph, thank the reader, restate your interest, and say you would be glad to discuss how you could help. Keep the whole letter under one page, use plain language, and read it aloud once to catch awkward sentences. Finally, check the company name and the role title twice."),
    dict(q="Can you explain what a prime number is?",
         a="A prime number is a whole number greater than one that can only be divided evenly by one and itself. For example 2, 3, 5, 7 and 11 are prime, while 9 is not because it equals 3 times 3.",
         bad="A prime number is any odd number.",
         follow=[("Is 1 a prime number?",
                  "No. By definition a prime must have exactly two different divisors, and 1 only has one. Excluding it also keeps the rule that every number factors into primes in exactly one way."),
                 ("How many primes are there?",
                  "Infinitely many. Euclid proved it over two thousand years ago: multiply any finite list of primes together, add one, and the result has a prime factor that is not on the list.")]),
    dict(q="How do I convert Celsius to Fahrenheit?",
         a="Multiply the Celsius temperature by 9, divide by 5, and add 32. For example, 20 degrees Celsius is 20 times 9 divided by 5, which is 36, plus 32, so 68 degrees Fahrenheit.",
         bad="Just double it.",
         follow=[("And the other way around?",
                  "Subtract 32, then multiply by 5 and divide by 9. So 50 degrees Fahrenheit is 18 times 5 divided by 9, which is 10 degrees Celsius.")]),
    dict(q="What's a healthy breakfast I can make quickly?",
         a="Oatmeal with fruit and a spoon of nut butter takes about five minutes. Greek yogurt with berries and a handful of nuts, or whole grain toast with an egg, are also quick and filling.",
         bad="A donut and coffee.",
         follow=[("I don't like oatmeal. Other ideas?",
                  "Try a smoothie with banana, spinach, yogurt and some oats blended in, or a whole grain wrap with scrambled eggs and salsa. Both can be made in under ten minutes.")]),
    dict(q="How do I get my toddler to go to sleep at night?",
         a="A consistent routine helps most: the same bedtime, a bath, pajamas, a story and then lights out, in the same order every night. Keep the room dark and quiet, and avoid screens in the hour before bed.",
         bad="Let them stay up until they fall asleep on the couch.",
         follow=[("She keeps getting out of bed.",
                  "Walk her back calmly and with as little talking as possible each time. It can take several nights, but being boring and consistent teaches that bedtime does not change."),
                 ("Should I give her a night light?",
                  "A dim, warm colored night light is fine if she is afraid of the dark. Avoid bright or blue light, which can make it harder to fall asleep.")]),
    dict(q="What is the Pythagorean theorem?",
         a="In a right triangle, the square of the longest side, the hypotenuse, equals the sum of the squares of the other two sides: a squared plus b squared equals c squared.",
         bad="It says all triangles have three sides.",
         follow=[("Can you give me an example?",
                  "Take a triangle with sides 3 and 4. Then 3 squared plus 4 squared is 9 plus 16, which is 25, so the hypotenuse is 5.")]),
    dict(q="How can I save money on groceries?",
         a="Plan meals for the week and shop with a list, buy store brands, cook larger batches and use leftovers, and check the unit price on the shelf label instead of the package price.",
         bad="Stop eating.",
         follow=[("Is buying in bulk always cheaper?",
                  "Not always. It saves money on things you use up before they spoil, like rice, beans or toilet paper, but bulk fresh food often goes to waste."),
                 ("Any tips for cooking on a budget?",
                  "Build meals around cheap staples like lentils, eggs, potatoes and frozen vegetables, and learn a few flexible recipes such as soups, stir fries and frittatas that use whatever is left in the fridge.")]),
    dict(q="Why do cats purr?",
         a="Cats purr when they are content, but also when they are stressed, hurt or giving birth, so it seems to be a way to soothe themselves and communicate. The sound comes from rapid twitching of the muscles in the larynx.",
         bad="Cats purr because they are angry.",
         follow=[("Do big cats purr too?",
                  "Some do. Cheetahs and cougars purr, but lions and tigers mostly cannot. They roar instead, thanks to a different structure of the voice box.")]),
    dict(q="How do I fix a leaky faucet?",
         a="Turn off the water supply under the sink, remove the handle, and replace the washer or cartridge inside, which is usually what wears out. Take the old part to a hardware store so you get the right replacement.",
         bad="Hit it with a hammer until it stops.",
         follow=[("How do I know if it's the washer or the cartridge?",
                  "Older faucets with separate hot and cold handles usually use rubber washers. Single handle faucets usually have a cartridge. Once you take the handle off you will see which one yours has.")],
         long="A dripping faucet almost always comes down to a worn seal, and fixing it is a good first plumbing job. Before you start, find the shutoff valves under the sink and turn both clockwise until they stop. Open the faucet to drain the remaining water and confirm the supply is off. Put the plug in the drain, or lay a towel in the sink, so small screws cannot fall down the pipe. Next, figure out what kind of faucet you have. A compression faucet has separate hot and cold handles that you tighten to close; inside each is a stem with a rubber washer at the bottom. A cartridge faucet can have one or two handles and moves smoothly; inside is a plastic or brass cartridge. Ball and ceramic disc faucets are other single handle designs. Remove the decorative cap on the handle with a flat screwdriver, undo the screw beneath it, and pull the handle off. For a compression faucet, unscrew the packing nut with an adjustable wrench and lift out the stem. The washer is held at the bottom by a small brass screw. Replace the washer with one of exactly the same size, and replace the O-ring on the stem if it looks flattened. For a cartridge faucet, pull out the retaining clip and lift the cartridge straight up, noting which way it faced. Take the old cartridge to the hardware store and buy a matching one. Coat new rubber parts lightly with plumber's grease, reassemble everything in reverse order, and turn the water back on slowly. If the faucet still drips, the valve seat may be worn, which you can replace with a seat wrench, or the whole faucet may be due for replacement."),
    dict(q="What's the best way to learn a new language as an adult?",
         a="Combine daily practice with real use. Spend a little time every day on vocabulary with spaced repetition, listen to podcasts or shows in the language, and find conversation practice with a tutor or exchange partner as early as you can.",
         bad="Adults can't learn languages.",
         follow=[("How long will it take to be conversational?",
                  "It depends on the language and how much time you spend. With about an hour a day, many people can hold simple conversations in a closely related language within six months to a year."),
                 ("Are language apps enough?",
                  "They are good for building vocabulary and a habit, but on their own they rarely get you speaking. Add real conversations and listening to natural speech.")]),
    dict(q="How does a refrigerator keep food cold?",
         a="It pumps heat out rather than adding cold. A refrigerant evaporates inside the coils in the fridge, absorbing heat, then a compressor squeezes it so it releases that heat through the coils on the back.",
         bad="It has ice inside the walls.",
         follow=[("Why is the back of my fridge warm?",
                  "That is the heat taken out of the inside being released into the room. It is normal, but leave some space behind the fridge so the air can carry it away.")]),
    dict(q="What is inflation?",
         a="Inflation is the general rise in prices over time, which means each unit of money buys a little less. Central banks usually aim for a low and steady rate, around two percent a year in many countries.",
         bad="Inflation is when balloons get bigger.",
         follow=[("Why don't they aim for zero inflation?",
                  "A small positive rate gives room to lower real interest rates in a downturn and avoids deflation, where falling prices make people delay spending and debts become harder to repay.")],
         long="Inflation is the rate at which the general level of prices rises, and it is easiest to understand through what it does to your money. If inflation is three percent this year, a basket of goods that cost one hundred dollars last year now costs about one hundred and three, so each dollar buys a bit less. Statistics offices measure it by tracking the prices of a fixed basket of things households buy, such as food, rent, transport and clothing, and reporting how the total cost changes. This is the consumer price index. There are a few main causes. Demand pull inflation happens when people and businesses want to buy more than the economy can produce, for example when credit is cheap or the government spends heavily. Cost push inflation happens when producing things becomes more expensive, for instance when oil prices jump, and firms pass the cost on. Expectations also matter: if workers expect prices to rise, they ask for higher wages, firms raise prices to cover them, and the expectation fulfills itself. Central banks try to keep inflation low and stable, often around two percent. Their main tool is the interest rate. Raising rates makes borrowing more expensive, slows spending and eventually cools price growth, while cutting rates does the opposite. The reason for aiming above zero is that mild inflation gives room to cut real interest rates in a recession and avoids deflation, which can trap an economy in falling prices and delayed spending. For individuals, inflation means cash savings lose value over time, which is why people hold savings in accounts that pay interest or in investments that tend to grow faster than prices. People with fixed rate debt, on the other hand, benefit a little, because they repay with money that is worth less."),
    dict(q="Can you recommend a good book for a long flight?",
         a="If you like gripping stories, The Martian by Andy Weir is fun and fast. For something thoughtful, try Klara and the Sun by Kazuo Ishiguro. Both are easy to pick up and put down between naps.",
         bad="The phone book.",
         follow=[("I prefer nonfiction.",
                  "Then you might enjoy Sapiens by Yuval Noah Harari, or The Immortal Life of Henrietta Lacks by Rebecca Skloot. Both read like stories while teaching you a lot.")]),
    dict(q="How do I make my own pizza dough?",
         a="Mix 500 grams of flour, 325 grams of warm water, 7 grams of dry yeast, 10 grams of salt and a spoon of olive oil. Knead for about ten minutes until smooth, then let it rise covered for one to two hours before shaping.",
         bad="You need a special machine to make dough.",
         follow=[("Can I make it the day before?",
                  "Yes, and it often tastes better. After kneading, put the dough in the fridge in a covered bowl. Take it out an hour or two before you want to shape it."),
                 ("How hot should the oven be?",
                  "As hot as your oven goes, usually around 250 degrees Celsius. Preheat a baking steel or stone for at least thirty minutes if you have one.")]),
    dict(q="What causes earthquakes?",
         a="Most earthquakes happen when stress builds up along faults, where pieces of the Earth's crust push against each other. When the rocks suddenly slip, the stored energy is released as seismic waves.",
         bad="Earthquakes are caused by the moon.",
         follow=[("Can scientists predict them?",
                  "Not the exact time and place. They can estimate the chance of a strong quake in a region over decades, and early warning systems can give a few seconds of notice once shaking starts.")]),
    dict(q="How should I prepare for a job interview?",
         a="Research the company and the role, prepare short stories about your past work that show the skills they want, and practice answering common questions out loud. Prepare a few questions of your own, and plan your route so you arrive on time.",
         bad="Just show up, preparation makes you look desperate.",
         follow=[("What if they ask about my weaknesses?",
                  "Pick a real but manageable weakness, and explain what you are doing to improve it. For example, that you used to take on too much yourself and now delegate and check in earlier."),
                 ("How do I answer \"Tell me about yourself\"?",
                  "Give a two minute summary: where you are now in your career, one or two achievements that matter for this role, and why you are interested in this job. Practice it, but do not memorize it word for word.")]),
    dict(q="Why do leaves change color in the fall?",
         a="During summer, leaves are full of green chlorophyll. As days shorten, trees stop making it and the green fades, revealing yellow and orange pigments that were there all along. Red colors come from new pigments some trees make in autumn.",
         bad="Because they get cold and sad.",
         follow=[("Why are some years more colorful than others?",
                  "Sunny days and cool but not freezing nights make trees produce more red pigment. A wet, warm autumn or an early hard frost usually gives duller colors.")]),
    dict(q="How do I clean a cast iron pan?",
         a="Rinse it with hot water while it is still warm and scrub with a brush or a scraper. A little soap is fine. Dry it completely on the stove, then rub a thin layer of oil over the inside.",
         bad="Put it in the dishwasher.",
         follow=[("There's rust on it. Is it ruined?",
                  "No. Scrub the rust off with steel wool, wash and dry it, then coat it thinly with oil and bake it upside down in a hot oven for an hour to rebuild the seasoning.")]),
    dict(q="What is the difference between a virus and bacteria?",
         a="Bacteria are single celled living organisms that can reproduce on their own, and many are harmless or helpful. Viruses are much smaller, and they can only reproduce inside the cells of a host. Antibiotics work against bacteria but not against viruses.",
         bad="There is no difference.",
         follow=[("So antibiotics won't help a cold?",
                  "Correct. Colds are caused by viruses, so antibiotics do not help and can cause side effects. Rest, fluids and time are what help a cold.")]),
    dict(q="How can I improve my posture while working at a desk?",
         a="Set the top of your screen at about eye level, keep your feet flat on the floor, and sit back in the chair so your lower back is supported. Most importantly, get up and move for a few minutes every half hour.",
         bad="Posture doesn't matter.",
         follow=[("Are standing desks worth it?",
                  "They help mainly because they make it easier to change position. Standing all day is not better than sitting all day; alternating is what helps.")]),
    dict(q="How do vaccines work?",
         a="Vaccines show your immune system a harmless piece or version of a germ, so it learns to recognize it. If you later meet the real germ, your body can respond quickly before you get seriously ill.",
         bad="Vaccines work by making you sick on purpose.",
         follow=[("Why do some vaccines need boosters?",
                  "Immune memory can fade over time, and some germs change. A booster reminds the immune system and raises protection again.")]),
    dict(q="What's a fun activity for a rainy day with kids?",
         a="Build a blanket fort and read stories inside it, set up an indoor treasure hunt with clues, or do a simple science experiment like making a baking soda volcano.",
         bad="Send them outside anyway.",
         follow=[("They are 4 and 7. Something creative?",
                  "Try making puppets from old socks and putting on a show, or give them a big sheet of paper to draw a map of an imaginary island together.")]),
    dict(q="How do I know if an egg is still good?",
         a="Put it in a bowl of water. A fresh egg sinks and lies flat, an older one stands on its end, and an egg that floats should be thrown out. When in doubt, crack it into a separate bowl and smell it.",
         bad="Eggs never go bad.",
         follow=[("How long do eggs keep in the fridge?",
                  "Usually three to five weeks after purchase. The date on the carton is a good guide, and eggs are often fine a little past it if they pass the float test.")]),
    dict(q="Can you explain how a credit score works?",
         a="A credit score is a number that summarizes how reliably you have handled debt. The biggest factors are paying bills on time and how much of your available credit you use. The length of your credit history and recent applications matter too.",
         bad="It is based on your salary.",
         follow=[("How can I raise mine quickly?",
                  "Pay every bill on time, pay down card balances so you use less than about thirty percent of your limits, and avoid opening several new accounts at once. Also check your report for errors.")]),
    dict(q="What is photosynthesis?",
         a="Photosynthesis is how plants make food from light. In their leaves they use sunlight to turn water and carbon dioxide into sugar, releasing oxygen as a by product.",
         bad="It is when plants sleep at night.",
         follow=[("Where does that happen in the plant?",
                  "In chloroplasts, small structures inside leaf cells that contain chlorophyll, the green pigment that absorbs light.")]),
    dict(q="How do I deal with a coworker who keeps interrupting me?",
         a="Try calmly finishing your point, for example by saying, \"Let me just finish this thought.\" If it keeps happening, talk to them privately, describe the pattern without blaming, and ask for what you need.",
         bad="Interrupt them back louder.",
         follow=[("What if they are my boss?",
                  "The same approach works, with a bit more care. Ask for a short one to one meeting, mention specific moments, and explain how it affects your work, such as ideas not being heard in meetings.")]),
    dict(q="How many hours of sleep do adults need?",
         a="Most adults need seven to nine hours a night. Some people function well on a little less or need a little more, but regularly getting under seven hours is linked to health problems.",
         bad="Four hours is plenty for everyone.",
         follow=[("Is it bad to sleep in on weekends?",
                  "An extra hour is fine, but large shifts confuse your body clock, a bit like jet lag. Keeping a similar wake up time every day helps you sleep better overall.")]),
    dict(q="What is the tallest mountain in the world?",
         a="Mount Everest is the highest above sea level at about 8,849 meters. Measured from base to peak, Mauna Kea in Hawaii is taller, since most of it is under the ocean.",
         bad="Mount Kilimanjaro.",
         follow=[("How long does it take to climb Everest?",
                  "An expedition usually takes about two months, most of it spent acclimatizing to the altitude by climbing up and down between camps before the summit push.")]),
    dict(q="How do I make a budget?",
         a="Add up your monthly income after tax, list your fixed costs like rent and bills, then decide how much goes to savings before planning flexible spending on food and fun. Track what you actually spend for a month and adjust.",
         bad="Budgets are pointless.",
         follow=[("What is the 50/30/20 rule?",
                  "It is a simple guideline: about fifty percent of take home pay for needs, thirty percent for wants and twenty percent for savings and paying off debt. Adjust the split to your situation.")],
         long="A budget is a plan for your money, and the goal is to decide in advance where it goes instead of wondering afterwards. Here is a practical way to build one. Start with your income. Use the amount that actually arrives in your account each month, after taxes and deductions. If your income varies, use a conservative estimate based on your lowest recent months. Next, gather your spending from the last two or three months, from bank and card statements. Sort it into categories: housing, utilities, groceries, transport, insurance, debt payments, subscriptions, eating out, entertainment, gifts and everything else. Many people are surprised by how much goes to small recurring charges. Now separate fixed costs, which are the same each month, from flexible costs, which you can change. Decide on savings before flexible spending, so that saving happens first rather than from whatever is left. A common starting point is the 50/30/20 split: half for needs, thirty percent for wants and twenty percent for savings and extra debt payments. If your rent is high, the split will look different, and that is fine. Build an emergency fund as an early goal, ideally three to six months of essential expenses, in a separate savings account. Then set a monthly limit for each flexible category and track spending against it, with an app, a spreadsheet or a notebook. The first month will not be perfect. At the end of it, compare plan and reality, and adjust the numbers to something you can actually keep. Review the budget whenever your income or life changes, and celebrate small wins like paying off a card, because keeping the habit matters more than getting every number right."),
    dict(q="Why do we have leap years?",
         a="A year, the time Earth takes to go around the sun, is about 365 and a quarter days. Adding an extra day every fourth year keeps the calendar in step with the seasons.",
         bad="To give people an extra day off.",
         follow=[("Is it really every four years?",
                  "Almost. Century years are not leap years unless they divide by 400, so 1900 was not a leap year but 2000 was. That small correction keeps the calendar accurate over centuries.")]),
    dict(q="How do I help a friend who is grieving?",
         a="Be present and listen more than you talk. Say that you are sorry and that you are there for them, and offer specific help, like bringing a meal or picking up the kids, instead of a general \"let me know\".",
         bad="Tell them to cheer up and move on.",
         follow=[("I never know what to say.",
                  "That is common. Simple words are enough: \"I'm so sorry. I'm thinking of you.\" Mentioning the person who died by name and sharing a memory often means a lot."),
                 ("How long should I keep checking in?",
                  "Grief lasts much longer than the first weeks, when most support comes. A message on a hard date, like a birthday or anniversary months later, can mean a great deal.")]),
    dict(q="What is machine learning?",
         a="Machine learning is a way of building software that learns patterns from examples instead of following rules written by hand. For example, a spam filter can learn from thousands of emails marked as spam or not spam.",
         bad="It is when machines go to school.",
         follow=[("How is it different from regular programming?",
                  "In regular programming you write the rules and the computer applies them. In machine learning you provide examples with answers, and a training algorithm finds rules that fit them."),
                 ("What is a neural network?",
                  "A neural network is a model made of layers of simple units that each compute a weighted sum of their inputs and apply a nonlinear function. Training adjusts the weights so the network's outputs match the examples.")],
         long="Machine learning is a branch of computer science where, instead of writing instructions for every case, you let a program learn from data. A useful way to see it is to compare it with ordinary programming. To detect spam the traditional way, you would write rules by hand: if the email contains certain words, or comes from certain addresses, mark it as spam. That works until spammers change their wording, and the rules become a tangle. With machine learning, you collect many emails labeled as spam or not spam, choose a model with adjustable parameters, and run a training algorithm that tunes those parameters so the model's predictions match the labels as well as possible. The result is a function that also works on new emails it has never seen, if the training examples were representative. There are a few main kinds. In supervised learning, every example comes with the correct answer, as in the spam case, or predicting house prices from their features. In unsupervised learning there are no labels, and the goal is to find structure, such as grouping customers with similar habits. In reinforcement learning, an agent learns by trial and error from rewards, which is how systems learned to play games. Models range from simple ones, like linear regression and decision trees, to deep neural networks with billions of parameters, which power modern speech recognition, translation and language models. Training such a network means repeatedly showing it examples, measuring how wrong it is with a loss function, and nudging every weight in the direction that reduces the loss, a method called gradient descent. The hard parts in practice are usually not the algorithms but the data: collecting enough good examples, avoiding bias, and checking that the model works on data it was not trained on."),
    dict(q="How do I stop procrastinating?",
         a="Make the first step tiny and specific, like opening the document and writing one sentence. Work in short focused blocks, for example twenty five minutes with a timer, and remove distractions such as your phone during that time.",
         bad="Wait until you feel motivated.",
         follow=[("I still get distracted after five minutes.",
                  "Start with even shorter blocks, say ten minutes, and write down distracting thoughts on paper to deal with later. Gradually increase the block as it becomes easier.")]),
    dict(q="Which is healthier, brown rice or white rice?",
         a="Brown rice keeps the bran and germ, so it has more fiber, vitamins and minerals, and it raises blood sugar more slowly. White rice is still fine as part of a balanced diet, especially paired with vegetables and protein.",
         bad="White rice is poisonous.",
         follow=[("Why does brown rice take longer to cook?",
                  "The bran layer slows down how fast water gets into the grain. Soaking it for an hour before cooking shortens the time.")]),
    dict(q="What is the best way to clean windows without streaks?",
         a="Use a mix of water with a little dish soap or vinegar, wash the glass with a sponge, then pull the water off with a squeegee, wiping the blade after each stroke. Avoid cleaning in direct sunlight, which dries the solution too fast.",
         bad="Use a dirty towel.",
         follow=[("I don't have a squeegee.",
                  "A microfiber cloth works well. Use one damp cloth to clean and a second dry one to buff. Old newspaper also works surprisingly well for buffing.")]),
    dict(q="How does the stock market work?",
         a="Companies sell shares, which are small pieces of ownership, and investors buy and sell those shares on exchanges. Prices move with supply and demand, which depend on how investors expect the company to perform.",
         bad="It's basically a casino where the house always wins.",
         follow=[("Is investing in index funds a good idea?",
                  "For many people, yes. An index fund holds a broad slice of the market, so it spreads risk and has low fees. It is meant for the long term, since prices can fall sharply in some years.")]),
    dict(q="How do I teach my dog to sit?",
         a="Hold a treat near your dog's nose and slowly move it up and back over the head. As the head goes up, the bottom goes down. The moment your dog sits, say \"sit\", give the treat and praise. Repeat in short sessions.",
         bad="Push the dog's back down until it gives up.",
         follow=[("He only sits when I have a treat.",
                  "Start giving the treat only every second or third time, and replace it with praise or a toy the rest of the time. Practicing in different places helps the command stick.")]),
    dict(q="What's the difference between baking soda and baking powder?",
         a="Baking soda is pure sodium bicarbonate and needs an acid in the recipe, like buttermilk or lemon juice, to make bubbles. Baking powder already contains both the soda and a dry acid, so it works with just moisture and heat.",
         bad="They are the same, just different brands.",
         follow=[("Can I substitute one for the other?",
                  "You can replace one teaspoon of baking powder with about a quarter teaspoon of baking soda plus an acid. Going the other way is harder, since you would need about three times as much powder.")]),
    dict(q="Why is exercise good for mental health?",
         a="Exercise releases chemicals that improve mood, lowers stress hormones and improves sleep. It can also give a sense of achievement and routine, and when done with others it adds social contact.",
         bad="It isn't, it only matters for your body.",
         follow=[("How much do I need?",
                  "Even a brisk thirty minute walk most days helps. Research finds benefits for mood from regular moderate activity; you do not need intense training.")]),
    dict(q="How do I write a for loop in Python?",
         a="Use for followed by a variable name, in, and something iterable. For example, for i in range(5): print(i) prints the numbers 0 to 4. The body of the loop is indented under the for line.",
         bad="Python doesn't have loops.",
         follow=[("How do I loop over a list with the index too?",
                  "Use enumerate: for index, item in enumerate(my_list): print(index, item). It gives you each position and the item together."),
                 ("What about looping over a dictionary?",
                  "Use items(): for key, value in my_dict.items(): print(key, value). Looping over the dictionary directly gives you only the keys.")]),
    dict(q="What are the symptoms of dehydration?",
         a="Thirst, dark yellow urine, dry mouth, tiredness, headache and dizziness are common signs. Severe dehydration can cause confusion and a rapid heartbeat, and needs medical attention.",
         bad="There are no symptoms.",
         follow=[("How much water should I drink a day?",
                  "It depends on your size, activity and climate. A simple check is the color of your urine: pale yellow usually means you are drinking enough.")]),
    dict(q="Can you tell me a bit about the Roman Empire?",
         a="The Roman Empire began in 27 BC when Augustus became the first emperor, and at its height it stretched from Britain to the Middle East. The western half fell in 476 AD, while the eastern half, the Byzantine Empire, lasted until 1453.",
         bad="It was a small village in Greece.",
         follow=[("Why did the western empire fall?",
                  "Historians point to many causes together: political instability, economic trouble, pressure from migrating peoples along the borders, and the cost of defending such a large territory.")],
         long="The story of Rome spans more than a thousand years, so it helps to divide it into periods. According to legend, the city was founded in 753 BC and ruled by kings at first. Around 509 BC the Romans expelled their last king and set up a republic, governed by elected magistrates and a senate of leading citizens. During the republic Rome expanded from a city state into the dominant power of the Mediterranean, defeating Carthage in the Punic Wars and taking over Greece, Spain and much of North Africa. That expansion brought wealth but also deep social tension, civil wars and powerful generals such as Julius Caesar, whose assassination in 44 BC led to another round of conflict. His adopted heir Octavian won it, and in 27 BC he took the name Augustus and became the first emperor, although he kept many of the republic's forms. The following two centuries, often called the Pax Romana, were a time of relative peace and prosperity. Roads, aqueducts, a common currency and Roman law tied together a vast territory with tens of millions of people, and Latin spread across the west. In the third century the empire went through a crisis of rapid changes of emperor, invasions and inflation. Emperors such as Diocletian and Constantine restored order with reforms, and Constantine supported Christianity and founded Constantinople as a new capital. The empire was eventually split into western and eastern halves. The west weakened under economic strain, political infighting and pressure from peoples such as the Goths and Vandals, and its last emperor was deposed in 476 AD. The east, known today as the Byzantine Empire, continued until the Ottomans took Constantinople in 1453."),
    dict(q="What should I do if my car battery dies?",
         a="You can jump start it with jumper cables and another car: connect red to the dead battery's positive terminal, then to the good battery's positive, black to the good battery's negative, and the last black clamp to bare metal on the dead car. Start the good car, wait a few minutes, then start yours.",
         bad="Buy a new car.",
         follow=[("How long should I drive afterwards?",
                  "Drive for at least twenty to thirty minutes so the alternator can recharge the battery. If it dies again soon, have the battery and charging system tested.")]),
    dict(q="Is coffee bad for you?",
         a="For most healthy adults, moderate coffee, about three to four cups a day, is not harmful and is even linked to some health benefits. It can disturb sleep if you drink it late, and pregnant people are usually advised to limit caffeine.",
         bad="Coffee will kill you.",
         follow=[("What time should I stop drinking it?",
                  "Caffeine lasts for hours, so many sleep experts suggest stopping about six to eight hours before bedtime, for example by early afternoon.")]),
    dict(q="How do I make friends in a new city?",
         a="Join something that meets regularly, like a sports team, a class, a choir or a volunteer group, because seeing the same people again and again is how friendships form. Say yes to invitations, and suggest a coffee with people you click with.",
         bad="Stay home and wait for people to knock on your door.",
         follow=[("I'm pretty introverted.",
                  "Then choose small groups and activities with a shared focus, like a book club or a climbing gym, where there is something to do besides small talk. One or two good connections are enough to start.")]),
]

# Ways people open a question, and the same ways to phrase a follow-up "explain in detail".
OPENERS = ["", "", "", "Hi! ", "Hello, ", "Quick question: ", "I was wondering, ", "Hey, can you help me? ",
           "Sorry if this is a silly question, but ", "My friend and I were arguing about this. "]
DETAIL_REQUESTS = ["Can you explain that in more detail?", "Could you go into more depth on that?",
                   "Can you give me a thorough explanation?", "Thanks. Can you walk me through it step by step?"]
GENERIC_REJECTED = [" I don't know.", " Why do you want to know that?", " You should search for that online.",
                    " That's not something I can help with.", " It depends."]


def lower_first(text):
    """The question after an opener that ends a sentence fragment ("I was wondering, what ...")."""
    return text[0].lower() + text[1:] if text[:2] not in ("I ", "I'") else text


def phrase_question(rng, question):
    opener = rng.choice(OPENERS)
    if opener.endswith(", ") or opener.endswith("but "):
        return opener + lower_first(question)
    return opener + question


def dialogue(turns):
    """rm-static's prompt: every turn as "\n\nHuman: ..." / "\n\nAssistant: ...", ending with
    "\n\nAssistant:" (the response follows after a space)."""
    text = ""
    for human, assistant in turns[:-1]:
        text += "\n\nHuman: " + human + "\n\nAssistant: " + assistant
    return text + "\n\nHuman: " + turns[-1][0] + "\n\nAssistant:"


def candidate_rows(rng):
    """Every dialogue the topics allow, in a fixed order: (prompt, chosen, rejected)."""
    rows = []
    for topic in TOPICS:
        first = phrase_question(rng, topic["q"])
        rejected_first = " " + topic["bad"] if rng.random() < 0.7 else rng.choice(GENERIC_REJECTED)
        rows.append((dialogue([(first, None)]), " " + topic["a"], rejected_first))
        history = [(first, topic["a"])]
        for question, answer in topic["follow"]:
            rows.append((dialogue(history + [(question, None)]), " " + answer, rng.choice(GENERIC_REJECTED)))
            history.append((question, answer))
        # The follow-ups alone after the first answer (a two-turn dialogue for each).
        for question, answer in topic["follow"][1:]:
            rows.append((dialogue([(first, topic["a"]), (question, None)]), " " + answer, rng.choice(GENERIC_REJECTED)))
        if "long" in topic:  # one long answer per round: as a follow-up, or asked for at once
            if rng.random() < 0.5:
                rows.append((dialogue([(first, topic["a"]), (rng.choice(DETAIL_REQUESTS), None)]),
                             " " + topic["long"], " " + topic["a"]))
            else:
                rows.append((dialogue([(first + " Please be thorough.", None)]), " " + topic["long"], rejected_first))
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    parser.add_argument("--out", default=os.path.join(repo, "data", "rm-static-sample.jsonl"))
    parser.add_argument("--rows", type=int, default=300)
    parser.add_argument("--seed", type=int, default=20240515)
    args = parser.parse_args()

    rng = random.Random(args.seed)
    rows, seen = [], set()
    # Rounds over the topics with new openers until there are enough distinct prompts.
    while len(rows) < args.rows:
        added = 0
        for prompt, chosen, rejected in candidate_rows(rng):
            if prompt in seen:
                continue
            seen.add(prompt)
            rows.append(dict(prompt=prompt, response=chosen, chosen=chosen, rejected=rejected))
            added += 1
        if added == 0:
            raise SystemExit(f"only {len(rows)} distinct dialogues can be made; ask for fewer --rows")
    rng.shuffle(rows)
    rows = rows[: args.rows]
    for row in rows:  # the shape rm-static has and the tests rely on
        assert row["prompt"].startswith("\n\nHuman: ") and row["prompt"].endswith("\n\nAssistant:")
        assert row["chosen"].startswith(" ") and row["rejected"].startswith(" ")
        assert "  " not in row["prompt"] + row["chosen"], "double spaces change SentencePiece boundaries"
    with open(args.out, "w", encoding="utf-8") as out:
        for row in rows:
            out.write(json.dumps(row, ensure_ascii=False) + "\n")
    print(f"wrote {len(rows)} rows to {args.out}")


if __name__ == "__main__":
    main()
