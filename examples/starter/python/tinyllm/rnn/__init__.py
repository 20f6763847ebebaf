"""Recurrent layers."""
