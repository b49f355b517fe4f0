-- Default data, inserted once across every device that shares the account (`storectl seed`).
INSERT INTO tags(name) VALUES ('inbox');
INSERT INTO tags(name) VALUES ('work');
INSERT INTO tags(name) VALUES ('personal');
INSERT INTO notes(uuid, title, body, updated_at) VALUES ('00000000-0000-4000-8000-000000000001', 'Welcome', 'Notes sync between devices with storectl.', 0);
