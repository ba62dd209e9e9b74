"""Menus and shortcuts declared as data: action specs with id, title, menu, group, order, shortcut."""
