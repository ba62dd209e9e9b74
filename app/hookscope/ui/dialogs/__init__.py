"""The modal questions: trust, architecture, input settings, edits, about."""
